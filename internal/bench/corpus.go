// Package bench holds the workloads behind `engram bench`: a synthetic
// corpus of agent sessions with realistic sizes and word frequencies, and
// latency statistics. Figures it produces go to BENCHMARKS.md with the
// command that produced them and a baseline measured in the same run.
package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// Message is one synthetic message or tool event.
type Message struct {
	Session string
	Agent   string
	Type    store.ContentType
	Content string
}

// Corpus generates agent sessions deterministically from a seed. Words are
// drawn from a Zipf distribution (s = 1.07, as in English text) over a
// vocabulary of pronounceable pseudo-words, so that the corpus has the
// long tail of rare words and the head of very common ones that real text
// has; code identifiers and paths are built from the same words.
type Corpus struct {
	rng   *rand.Rand
	zipf  *rand.Zipf
	vocab []string
	n     int
}

// VocabSize is the number of distinct words the corpus draws from.
const VocabSize = 60000

// NewCorpus returns a corpus generator.
func NewCorpus(seed uint64) *Corpus {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := &Corpus{rng: rng, vocab: vocabulary(VocabSize)}
	c.zipf = rand.NewZipf(rng, 1.07, 2.7, uint64(len(c.vocab)-1))
	return c
}

// vocabulary makes n distinct pseudo-words, the most frequent shortest, as
// in natural language.
func vocabulary(n int) []string {
	onsets := []string{"", "b", "br", "c", "ch", "d", "f", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "pl", "r", "s", "sh", "st", "t", "tr", "v", "w", "z"}
	vowels := []string{"a", "e", "i", "o", "u", "ai", "ea", "io", "ou"}
	codas := []string{"", "n", "r", "s", "t", "l", "nd", "st", "ck", "m"}
	seen := map[string]bool{}
	var words []string
	rng := rand.New(rand.NewPCG(1, 2))
	for syllables := 1; len(words) < n; syllables++ {
		// Enough attempts to fill this length before moving on.
		for try := 0; try < n*3 && len(words) < n; try++ {
			var b strings.Builder
			for range syllables {
				b.WriteString(onsets[rng.IntN(len(onsets))])
				b.WriteString(vowels[rng.IntN(len(vowels))])
				b.WriteString(codas[rng.IntN(len(codas))])
			}
			w := b.String()
			if len(w) < 2 || seen[w] {
				continue
			}
			seen[w] = true
			words = append(words, w)
			if syllables == 1 && len(words) >= 1500 {
				break
			}
		}
	}
	return words
}

// Word returns a word drawn by frequency.
func (c *Corpus) Word() string { return c.vocab[c.zipf.Uint64()] }

// Vocabulary returns the words by frequency rank, most frequent first.
func (c *Corpus) Vocabulary() []string { return c.vocab }

// lognormal draws a size with the given median, spread and bounds.
func (c *Corpus) lognormal(median, sigma float64, lo, hi int) int {
	v := median * math.Exp(sigma*c.rng.NormFloat64())
	return max(lo, min(hi, int(v)))
}

func (c *Corpus) sentence(words int) string {
	var b strings.Builder
	for i := range words {
		w := c.Word()
		if i == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	b.WriteByte('.')
	return b.String()
}

func (c *Corpus) prose(words int) string {
	var b strings.Builder
	for words > 0 {
		n := min(words, c.lognormal(14, 0.4, 3, 40))
		words -= n
		if b.Len() > 0 {
			if c.rng.IntN(5) == 0 {
				b.WriteString("\n\n")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(c.sentence(n))
	}
	return b.String()
}

func (c *Corpus) identifier() string {
	parts := 1 + c.rng.IntN(3)
	var b strings.Builder
	for i := range parts {
		w := c.Word()
		if i > 0 || c.rng.IntN(3) == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		b.WriteString(w)
	}
	return b.String()
}

func (c *Corpus) path() string {
	depth := 1 + c.rng.IntN(3)
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = c.Word()
	}
	exts := []string{".go", ".ts", ".py", ".md", ".rs", "_test.go"}
	return strings.Join(parts, "/") + "/" + c.Word() + exts[c.rng.IntN(len(exts))]
}

// codeLines writes lines that look like source code or program output.
func (c *Corpus) codeLines(words int) string {
	var b strings.Builder
	for words > 0 {
		switch c.rng.IntN(6) {
		case 0:
			fmt.Fprintf(&b, "func %s(%s %s) error {\n", c.identifier(), c.Word(), c.identifier())
			words -= 4
		case 1:
			fmt.Fprintf(&b, "\t%s := %s.%s(ctx, %s)\n", c.Word(), c.Word(), c.identifier(), c.Word())
			words -= 5
		case 2:
			fmt.Fprintf(&b, "%s:%d: %s\n", c.path(), 1+c.rng.IntN(900), c.sentence(c.lognormal(6, 0.5, 2, 15)))
			words -= 10
		case 3:
			fmt.Fprintf(&b, "\t// %s\n", c.sentence(c.lognormal(8, 0.5, 2, 20)))
			words -= 8
		case 4:
			fmt.Fprintf(&b, "--- FAIL: Test%s (%d.%02ds)\n", c.identifier(), c.rng.IntN(5), c.rng.IntN(100))
			words -= 3
		default:
			fmt.Fprintf(&b, "\treturn %s.%s(%d)\n\n", c.Word(), c.identifier(), c.rng.IntN(1000))
			words -= 3
		}
	}
	return b.String()
}

// Next returns the next message. Sessions hold about 200 messages each;
// the mix and sizes follow coding-agent transcripts: short prompts, longer
// responses, small tool calls and long-tailed tool results (a median of
// about 1.5 KB, up to 60 KB).
func (c *Corpus) Next() Message {
	m := Message{Session: fmt.Sprintf("bench-%05d", c.n/200), Agent: fmt.Sprintf("agent-%d", c.n%3)}
	c.n++
	switch r := c.rng.IntN(100); {
	case r < 25:
		m.Type = store.UserPrompt
		m.Content = c.prose(c.lognormal(30, 0.8, 3, 400))
	case r < 55:
		m.Type = store.AgentResponse
		m.Content = c.prose(c.lognormal(150, 0.7, 10, 2000))
		if c.rng.IntN(3) == 0 {
			m.Content += "\n\n```go\n" + c.codeLines(c.lognormal(40, 0.6, 5, 300)) + "```\n"
		}
	case r < 75:
		m.Type = store.ToolCall
		args := map[string]any{"tool": []string{"Bash", "Read", "Edit", "Grep"}[c.rng.IntN(4)], "path": c.path()}
		if c.rng.IntN(2) == 0 {
			args["command"] = c.Word() + " " + c.identifier() + " " + c.path()
		}
		b, _ := json.Marshal(args)
		m.Content = string(b)
	default:
		m.Type = store.ToolResult
		m.Content = c.codeLines(c.lognormal(220, 1.0, 5, 8000))
	}
	// A unique tag keeps every message distinct, as real messages are
	// (timestamps, ids), so content addressing does not collapse them.
	m.Content += fmt.Sprintf("\n[msg %d]", c.n)
	return m
}
