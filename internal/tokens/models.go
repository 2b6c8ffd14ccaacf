package tokens

import (
	"fmt"
	"sort"
	"strings"
)

// Model describes a model engram budgets for: how many tokens its context
// window holds and which encoding counts them.
type Model struct {
	Name     string `json:"name" toml:"name"`
	Provider string `json:"provider" toml:"provider"`
	// ContextWindow is the model's context window in tokens.
	ContextWindow int `json:"context_window" toml:"context_window"`
	// MaxOutput is the most tokens the model writes in one response; zero
	// if unknown.
	MaxOutput int `json:"max_output,omitempty" toml:"max_output"`
	// Encoding is the encoding used to count the model's tokens.
	Encoding string `json:"encoding" toml:"encoding"`
	// Exact is true when Encoding is the model's own tokenizer. Anthropic,
	// Google and Meta tokenizers are not available offline, so their
	// models are counted with o200k_base, an approximation: budgets for
	// them should keep a margin.
	Exact bool `json:"exact" toml:"exact"`
}

// Catalog maps model names to models. Names match exactly or by prefix, so
// that dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06")
// find their family.
type Catalog struct {
	models map[string]Model
}

// builtinModels are the models engram knows without configuration, as their
// providers published them. Configuration overrides and extends them.
func builtinModels() []Model {
	approx := func(name, provider string, window, out int) Model {
		return Model{Name: name, Provider: provider, ContextWindow: window, MaxOutput: out, Encoding: O200kBase}
	}
	exact := func(name string, window, out int, enc string) Model {
		return Model{Name: name, Provider: "openai", ContextWindow: window, MaxOutput: out, Encoding: enc, Exact: true}
	}
	return []Model{
		// Anthropic.
		approx("claude-opus-4-5", "anthropic", 200_000, 64_000),
		approx("claude-opus-4-1", "anthropic", 200_000, 32_000),
		approx("claude-opus-4", "anthropic", 200_000, 32_000),
		approx("claude-sonnet-4-5", "anthropic", 200_000, 64_000),
		approx("claude-sonnet-4", "anthropic", 200_000, 64_000),
		approx("claude-haiku-4-5", "anthropic", 200_000, 64_000),
		approx("claude-3-7-sonnet", "anthropic", 200_000, 64_000),
		approx("claude-3-5-haiku", "anthropic", 200_000, 8_192),
		// OpenAI.
		exact("gpt-5.1", 400_000, 128_000, O200kBase),
		exact("gpt-5", 400_000, 128_000, O200kBase),
		exact("gpt-5-mini", 400_000, 128_000, O200kBase),
		exact("gpt-5-nano", 400_000, 128_000, O200kBase),
		exact("gpt-5-codex", 400_000, 128_000, O200kBase),
		exact("gpt-4.1", 1_047_576, 32_768, O200kBase),
		exact("gpt-4.1-mini", 1_047_576, 32_768, O200kBase),
		exact("gpt-4.1-nano", 1_047_576, 32_768, O200kBase),
		exact("gpt-4o", 128_000, 16_384, O200kBase),
		exact("gpt-4o-mini", 128_000, 16_384, O200kBase),
		exact("o3", 200_000, 100_000, O200kBase),
		exact("o4-mini", 200_000, 100_000, O200kBase),
		exact("gpt-4-turbo", 128_000, 4_096, Cl100kBase),
		exact("gpt-4", 8_192, 8_192, Cl100kBase),
		exact("gpt-3.5-turbo", 16_385, 4_096, Cl100kBase),
		// Google.
		approx("gemini-3-pro", "google", 1_048_576, 65_536),
		approx("gemini-2.5-pro", "google", 1_048_576, 65_536),
		approx("gemini-2.5-flash", "google", 1_048_576, 65_536),
		approx("gemini-2.5-flash-lite", "google", 1_048_576, 65_536),
		approx("gemini-2.0-flash", "google", 1_048_576, 8_192),
		// Meta.
		approx("llama-4-scout", "meta", 10_000_000, 0),
		approx("llama-4-maverick", "meta", 1_000_000, 0),
		approx("llama-3.3-70b", "meta", 128_000, 0),
		approx("llama-3.1-405b", "meta", 128_000, 0),
		approx("llama-3.1-70b", "meta", 128_000, 0),
		approx("llama-3.1-8b", "meta", 128_000, 0),
	}
}

// NewCatalog returns the built-in models with overrides applied: an override
// with a known name replaces its non-zero fields, one with a new name adds a
// model. Overrides are validated: a model needs a name, a positive context
// window and a known encoding.
func NewCatalog(overrides ...Model) (*Catalog, error) {
	c := &Catalog{models: map[string]Model{}}
	for _, m := range builtinModels() {
		c.models[m.Name] = m
	}
	var problems []string
	for _, o := range overrides {
		name := strings.ToLower(strings.TrimSpace(o.Name))
		if name == "" {
			problems = append(problems, "a model override has no name")
			continue
		}
		m, known := c.models[name]
		if !known {
			m = Model{Name: name, Encoding: O200kBase}
		}
		if o.Provider != "" {
			m.Provider = o.Provider
		}
		if o.ContextWindow != 0 {
			m.ContextWindow = o.ContextWindow
		}
		if o.MaxOutput != 0 {
			m.MaxOutput = o.MaxOutput
		}
		if o.Encoding != "" {
			m.Encoding = o.Encoding
			m.Exact = o.Exact
		}
		if m.ContextWindow <= 0 {
			problems = append(problems, fmt.Sprintf("model %s: context_window must be positive", name))
		}
		if _, ok := specs[m.Encoding]; !ok {
			problems = append(problems, fmt.Sprintf("model %s: unknown encoding %q (known: %s)", name, m.Encoding, strings.Join(Names(), ", ")))
		}
		c.models[name] = m
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("model catalog: %s", strings.Join(problems, "; "))
	}
	return c, nil
}

// Lookup returns the model called name: an exact match, else the longest
// catalog name that name starts with followed by '-' or '@' (a dated or
// versioned snapshot). Names are compared in lower case.
func (c *Catalog) Lookup(name string) (Model, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	if m, ok := c.models[name]; ok {
		return m, true
	}
	best := ""
	for k := range c.models {
		if len(k) > len(best) && strings.HasPrefix(name, k) && (name[len(k)] == '-' || name[len(k)] == '@') {
			best = k
		}
	}
	if best == "" {
		return Model{}, false
	}
	return c.models[best], true
}

// Models returns every model, sorted by provider then name.
func (c *Catalog) Models() []Model {
	out := make([]Model, 0, len(c.models))
	for _, m := range c.models {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return out[i].Name < out[j].Name
	})
	return out
}
