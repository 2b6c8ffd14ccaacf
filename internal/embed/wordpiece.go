package embed

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPiece is a Hugging Face tokenizer.json with a WordPiece model, the
// tokenizer of BERT-family models and of the Model2Vec models distilled
// from them. Only what static embeddings need is implemented: normalise,
// pre-tokenise, greedy longest-match word pieces; no special tokens, no
// offsets.
type wordPiece struct {
	vocab       map[string]int
	unk         int // -1 if the model has no unknown token
	prefix      string
	maxWordRune int

	lowercase, stripAccents, cleanText, chinese bool
	split                                       func(string) []string
}

// tokenizerJSON is the part of tokenizer.json a wordPiece reads.
type tokenizerJSON struct {
	Normalizer   *normalizerJSON `json:"normalizer"`
	PreTokenizer *struct {
		Type          string                  `json:"type"`
		PreTokenizers []struct{ Type string } `json:"pretokenizers"`
	} `json:"pre_tokenizer"`
	Model struct {
		Type                    string         `json:"type"`
		UnkToken                string         `json:"unk_token"`
		ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int            `json:"max_input_chars_per_word"`
		Vocab                   map[string]int `json:"vocab"`
	} `json:"model"`
}

type normalizerJSON struct {
	Type               string           `json:"type"`
	CleanText          *bool            `json:"clean_text"`
	HandleChineseChars *bool            `json:"handle_chinese_chars"`
	StripAccents       *bool            `json:"strip_accents"`
	Lowercase          *bool            `json:"lowercase"`
	Normalizers        []normalizerJSON `json:"normalizers"`
}

func parseWordPiece(data []byte) (*wordPiece, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tj.Model.Type != "WordPiece" {
		return nil, fmt.Errorf("tokenizer.json: model type %q is not supported (engram reads WordPiece tokenizers, as in the potion and M2V English models)", tj.Model.Type)
	}
	if len(tj.Model.Vocab) == 0 {
		return nil, fmt.Errorf("tokenizer.json: empty vocabulary")
	}
	w := &wordPiece{vocab: tj.Model.Vocab, unk: -1, prefix: "##", maxWordRune: 100}
	if tj.Model.ContinuingSubwordPrefix != nil {
		w.prefix = *tj.Model.ContinuingSubwordPrefix
	}
	if tj.Model.MaxInputCharsPerWord > 0 {
		w.maxWordRune = tj.Model.MaxInputCharsPerWord
	}
	if id, ok := w.vocab[tj.Model.UnkToken]; ok {
		w.unk = id
	}
	if err := w.setNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	w.split = splitBert
	if p := tj.PreTokenizer; p != nil {
		types := []string{p.Type}
		if p.Type == "Sequence" {
			types = types[:0]
			for _, q := range p.PreTokenizers {
				types = append(types, q.Type)
			}
		}
		for _, t := range types {
			switch t {
			case "BertPreTokenizer":
				w.split = splitBert
			case "Whitespace":
				w.split = splitWhitespace
			case "WhitespaceSplit":
				w.split = strings.Fields
			default:
				return nil, fmt.Errorf("tokenizer.json: pre-tokenizer %q is not supported", t)
			}
		}
	}
	return w, nil
}

func (w *wordPiece) setNormalizer(n *normalizerJSON) error {
	if n == nil {
		return nil
	}
	on := func(b *bool, def bool) bool {
		if b == nil {
			return def
		}
		return *b
	}
	switch n.Type {
	case "BertNormalizer":
		w.cleanText = on(n.CleanText, true)
		w.chinese = on(n.HandleChineseChars, true)
		w.lowercase = on(n.Lowercase, true)
		w.stripAccents = on(n.StripAccents, w.lowercase) // BERT strips accents when it lowercases
	case "Lowercase":
		w.lowercase = true
	case "StripAccents":
		w.stripAccents = true
	case "NFD", "NFC", "NFKC", "NFKD":
		// Accents are handled by StripAccents; composition does not change
		// which vocabulary pieces match after it.
	case "Sequence":
		for i := range n.Normalizers {
			if err := w.setNormalizer(&n.Normalizers[i]); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("tokenizer.json: normalizer %q is not supported", n.Type)
	}
	return nil
}

// normalize applies BERT's text normalisation.
func (w *wordPiece) normalize(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case w.cleanText && (r == 0 || r == utf8.RuneError || isControl(r)):
			continue
		case w.cleanText && unicode.IsSpace(r):
			b.WriteByte(' ')
		case w.chinese && isCJK(r):
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	s = b.String()
	if w.stripAccents {
		s = norm.NFD.String(s)
		s = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Mn, r) {
				return -1
			}
			return r
		}, s)
	}
	if w.lowercase {
		s = strings.ToLower(s)
	}
	return s
}

func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co)
}

func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B820 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// isPunct is BERT's punctuation: ASCII symbols and Unicode P* categories.
func isPunct(r rune) bool {
	if r >= 33 && r <= 47 || r >= 58 && r <= 64 || r >= 91 && r <= 96 || r >= 123 && r <= 126 {
		return true
	}
	return unicode.IsPunct(r)
}

// splitBert splits on white space and makes each punctuation character a
// word of its own.
func splitBert(s string) []string {
	var out []string
	start := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		case isPunct(r):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			out = append(out, s[i:i+utf8.RuneLen(r)])
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// splitWhitespace is the Whitespace pre-tokenizer, \w+|[^\w\s]+: runs of
// word characters and runs of other non-space characters.
func splitWhitespace(s string) []string {
	var out []string
	start, kind := -1, 0
	for i, r := range s {
		k := 2 // neither word nor space
		switch {
		case unicode.IsSpace(r):
			k = 0
		case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			k = 1
		}
		if k != kind && start >= 0 {
			out = append(out, s[start:i])
			start = -1
		}
		if k != 0 && start < 0 {
			start = i
		}
		kind = k
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// Encode appends the token IDs of text to dst, at most max of them (0: no
// limit); unknown words give the unknown token, which the caller may drop.
func (w *wordPiece) Encode(dst []int, text string, limit int) []int {
	for _, word := range w.split(w.normalize(text)) {
		if limit > 0 && len(dst) >= limit {
			break
		}
		dst = w.encodeWord(dst, word)
	}
	if limit > 0 && len(dst) > limit {
		dst = dst[:limit]
	}
	return dst
}

// encodeWord is WordPiece's greedy longest-match-first: the longest
// vocabulary prefix of the word, then of the rest with the continuing
// prefix; a word that cannot be covered is the unknown token.
func (w *wordPiece) encodeWord(dst []int, word string) []int {
	if utf8.RuneCountInString(word) > w.maxWordRune {
		return w.appendUnk(dst)
	}
	mark := len(dst)
	for start := 0; start < len(word); {
		end := len(word)
		found := -1
		for end > start {
			piece := word[start:end]
			if start > 0 {
				piece = w.prefix + piece
			}
			if id, ok := w.vocab[piece]; ok {
				found = id
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if found < 0 {
			return w.appendUnk(dst[:mark])
		}
		dst = append(dst, found)
		start = end
	}
	return dst
}

func (w *wordPiece) appendUnk(dst []int) []int {
	if w.unk >= 0 {
		dst = append(dst, w.unk)
	}
	return dst
}
