package tokens

import (
	"strings"
	"testing"
)

func TestCatalog_Lookup(t *testing.T) {
	c, err := NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"gpt-4o":                     "gpt-4o",
		"GPT-4o-mini-2024-07-18":     "gpt-4o-mini",
		"gpt-4.1-2025-04-14":         "gpt-4.1",
		"gpt-5-mini-2025-08-07":      "gpt-5-mini",
		"claude-sonnet-4-5-20250929": "claude-sonnet-4-5",
		"claude-opus-4-1@20250805":   "claude-opus-4-1",
		"gemini-2.5-pro":             "gemini-2.5-pro",
		"gpt-4-0613":                 "gpt-4",
	} {
		m, ok := c.Lookup(name)
		if !ok || m.Name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", name, m.Name, ok, want)
		}
		if ok && (m.ContextWindow <= 0 || m.Encoding == "") {
			t.Errorf("Lookup(%q) = %+v: incomplete", name, m)
		}
	}
	for _, name := range []string{"gpt-4oo", "claude", "", "mystery-model"} {
		if m, ok := c.Lookup(name); ok {
			t.Errorf("Lookup(%q) = %q, want no match", name, m.Name)
		}
	}
	if m, _ := c.Lookup("gpt-4"); m.Encoding != Cl100kBase || !m.Exact {
		t.Errorf("gpt-4 = %+v, want exact cl100k_base", m)
	}
	if m, _ := c.Lookup("claude-sonnet-4-5"); m.Exact {
		t.Errorf("claude-sonnet-4-5 claims an exact encoding")
	}
}

func TestCatalog_Overrides(t *testing.T) {
	c, err := NewCatalog(
		Model{Name: "claude-sonnet-4-5", ContextWindow: 1_000_000},
		Model{Name: "Local-Qwen", ContextWindow: 32_768, Provider: "ollama"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Lookup("claude-sonnet-4-5"); m.ContextWindow != 1_000_000 || m.Provider != "anthropic" {
		t.Errorf("override = %+v, want 1M window, provider kept", m)
	}
	if m, ok := c.Lookup("local-qwen"); !ok || m.Encoding != O200kBase || m.ContextWindow != 32_768 {
		t.Errorf("new model = %+v, %v", m, ok)
	}
	_, err = NewCatalog(Model{Name: "x"}, Model{Name: "y", ContextWindow: 10, Encoding: "p50k"}, Model{ContextWindow: 5})
	for _, want := range []string{"model x: context_window", `unknown encoding "p50k"`, "no name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad overrides: error %v, want it to mention %q", err, want)
		}
	}
}
