package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/engramhq/engram/internal/llm"
)

// Classifier classifies a question in words. Classify (rules) is the
// default; LLMClassifier asks a configured chat model.
type Classifier interface {
	Classify(ctx context.Context, question string) (Classification, error)
}

// LLMClassifier classifies questions with a chat model's tool call, the
// seed's classification tool. When the model fails, Ask falls back to the
// rules.
type LLMClassifier struct {
	c *llm.Client
}

// NewLLMClassifier returns a classifier that asks c.
func NewLLMClassifier(c *llm.Client) *LLMClassifier { return &LLMClassifier{c: c} }

// classifyPrompt is the system prompt: about 150 tokens, as the seed plans.
const classifyPrompt = `You route questions to the archivalist, the shared memory of coding agents.
It only answers about the PAST: what was done, seen, tried, decided or learned.
A question about what to do, should do, or will do is not retrospective: say why.
Intent: recall (look up), store (record something), check (verify against history).
Domain: patterns (conventions, approaches), failures (errors, things that broke),
decisions (choices made), files (files changed or read), learnings (lessons, insights).
Extract entities when present. Give your confidence from 0 to 1.
Call classify_archivalist_query with the result.`

var classifyTool = llm.Tool{
	Name:        "classify_archivalist_query",
	Description: "Classify whether a query is retrospective (about past actions, observations or learnings) and extract its intent, domain and entities",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"is_retrospective": map[string]any{"type": "boolean", "description": "true if the query is about past actions, observations or learnings; false if about future needs, plans or recommendations"},
			"rejection_reason": map[string]any{"type": "string", "description": "if not retrospective, why"},
			"intent":           map[string]any{"type": "string", "enum": []string{"recall", "store", "check"}},
			"domain":           map[string]any{"type": "string", "enum": []string{"patterns", "failures", "decisions", "files", "learnings"}},
			"entities": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"scope":      map[string]any{"type": "string", "description": "area being asked about, such as auth or database"},
					"timeframe":  map[string]any{"type": "string"},
					"agent":      map[string]any{"type": "string"},
					"file_paths": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					"error_type": map[string]any{"type": "string"},
				},
			},
			"confidence": map[string]any{"type": "number", "minimum": 0, "maximum": 1},
		},
		"required": []string{"is_retrospective", "confidence"},
	},
}

// Classify implements Classifier.
func (l *LLMClassifier) Classify(ctx context.Context, question string) (Classification, error) {
	args, err := l.c.Call(ctx, []llm.Message{{Role: "system", Content: classifyPrompt}, {Role: "user", Content: question}}, classifyTool)
	if err != nil {
		return Classification{}, err
	}
	var ans struct {
		IsRetrospective *bool    `json:"is_retrospective"`
		RejectionReason string   `json:"rejection_reason"`
		Intent          string   `json:"intent"`
		Domain          string   `json:"domain"`
		Confidence      *float64 `json:"confidence"`
		Entities        struct {
			Scope     string   `json:"scope"`
			Timeframe string   `json:"timeframe"`
			Agent     string   `json:"agent"`
			FilePaths []string `json:"file_paths"`
			ErrorType string   `json:"error_type"`
		} `json:"entities"`
	}
	if err := json.Unmarshal(args, &ans); err != nil {
		return Classification{}, fmt.Errorf("%w: %v", llm.ErrBadAnswer, err)
	}
	if ans.IsRetrospective == nil || ans.Confidence == nil || *ans.Confidence < 0 || *ans.Confidence > 1 {
		return Classification{}, fmt.Errorf("%w: is_retrospective and a confidence in [0, 1] are required", llm.ErrBadAnswer)
	}
	c := Classification{Retrospective: *ans.IsRetrospective, Reason: ans.RejectionReason, Confidence: *ans.Confidence,
		By: "llm:" + l.c.Model()}
	if c.Retrospective {
		switch QueryIntent(ans.Intent) {
		case Recall, Store, Check:
			c.Intent = QueryIntent(ans.Intent)
		case "":
			c.Intent = Recall
		default:
			return Classification{}, fmt.Errorf("%w: intent %q", llm.ErrBadAnswer, ans.Intent)
		}
		if ans.Domain != "" {
			d, ok := domainNames[ans.Domain]
			if !ok {
				return Classification{}, fmt.Errorf("%w: domain %q", llm.ErrBadAnswer, ans.Domain)
			}
			c.Domain = d
		}
	} else if c.Reason == "" {
		c.Reason = "the model judged it not about the past"
	}
	// The model's entities, with the rules' for what it left out.
	rules := entities(question)
	c.Entities = Entities{Scope: cmpOr(ans.Entities.Scope, rules.Scope), Timeframe: cmpOr(ans.Entities.Timeframe, rules.Timeframe),
		Agent: cmpOr(ans.Entities.Agent, rules.Agent), Files: ans.Entities.FilePaths, ErrorType: cmpOr(ans.Entities.ErrorType, rules.ErrorType)}
	if len(c.Entities.Files) == 0 {
		c.Entities.Files = rules.Files
	}
	if c.Entities.Scope != "" && !isL1(c.Entities.Scope) && ValidateCategory(c.Entities.Scope) != nil {
		// A scope in words is searched for, not filtered on.
		c.Entities.Scope = ""
	}
	c.Entities.Files = slices.DeleteFunc(c.Entities.Files, func(f string) bool { return f == "" })
	c.finish(question)
	return c, nil
}
