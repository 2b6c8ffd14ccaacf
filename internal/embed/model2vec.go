package embed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Model2Vec is a pretrained static embedding model in the Model2Vec
// format (github.com/MinishLab/model2vec), read from a local directory
// holding model.safetensors (an "embeddings" tensor of one row per
// token, optionally "weights" per token and a "mapping" from token to
// row), tokenizer.json (a WordPiece tokenizer) and config.json. A text's
// vector is the mean of its tokens' rows, unknown tokens left out, at
// most MaxTokens tokens, normalised.
type Model2Vec struct {
	name      string
	dim       int
	rows      []float32 // row-major, dim per row
	weights   []float32 // per token ID, or nil
	mapping   []int64   // token ID -> row, or nil
	tok       *wordPiece
	normalize bool
}

// Model2VecFiles are the files a Model2Vec directory must hold.
var Model2VecFiles = []string{"model.safetensors", "tokenizer.json", "config.json"}

// MaxTokens is how many tokens of a text a static model reads, as
// Model2Vec's own encoder does by default.
const MaxTokens = 512

// LoadModel2Vec reads a Model2Vec model from dir.
func LoadModel2Vec(dir string) (*Model2Vec, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("load model2vec model %s: no %s (a Model2Vec directory holds %v)", dir, name, Model2VecFiles)
		}
		if err != nil {
			return nil, fmt.Errorf("load model2vec model: %w", err)
		}
		return b, nil
	}
	st, err := read("model.safetensors")
	if err != nil {
		return nil, err
	}
	tj, err := read("tokenizer.json")
	if err != nil {
		return nil, err
	}
	cj, err := read("config.json")
	if err != nil {
		return nil, err
	}
	m, err := newModel2Vec(st, tj, cj)
	if err != nil {
		return nil, fmt.Errorf("load model2vec model %s: %w", dir, err)
	}
	sum := sha256.Sum256(st)
	m.name = fmt.Sprintf("model2vec-%s-%s", filepath.Base(filepath.Clean(dir)), hex.EncodeToString(sum[:6]))
	return m, nil
}

func newModel2Vec(st, tj, cj []byte) (*Model2Vec, error) {
	var cfg struct {
		Normalize *bool `json:"normalize"`
	}
	if err := json.Unmarshal(cj, &cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	m := &Model2Vec{normalize: cfg.Normalize == nil || *cfg.Normalize}
	tensors, err := readSafetensors(st)
	if err != nil {
		return nil, err
	}
	emb, ok := tensors["embeddings"]
	if !ok {
		emb, ok = tensors["0"]
	}
	if !ok {
		return nil, errors.New(`model.safetensors: no "embeddings" tensor`)
	}
	if len(emb.Shape) != 2 || emb.Shape[0] == 0 || emb.Shape[1] == 0 {
		return nil, fmt.Errorf("model.safetensors: embeddings of shape %v, want rows × dimensions", emb.Shape)
	}
	m.dim = int(emb.Shape[1])
	if m.rows, err = emb.floats(); err != nil {
		return nil, fmt.Errorf("model.safetensors: embeddings: %w", err)
	}
	nrows := emb.Shape[0]
	if t, ok := tensors["weights"]; ok {
		if m.weights, err = t.floats(); err != nil {
			return nil, fmt.Errorf("model.safetensors: weights: %w", err)
		}
	}
	if t, ok := tensors["mapping"]; ok {
		if m.mapping, err = t.ints(); err != nil {
			return nil, fmt.Errorf("model.safetensors: mapping: %w", err)
		}
		for i, r := range m.mapping {
			if r < 0 || r >= nrows {
				return nil, fmt.Errorf("model.safetensors: mapping sends token %d to row %d of %d", i, r, nrows)
			}
		}
	}
	if m.tok, err = parseWordPiece(tj); err != nil {
		return nil, err
	}
	// Every token must have a row.
	tokens := int64(0)
	for _, id := range m.tok.vocab {
		tokens = max(tokens, int64(id)+1)
	}
	if m.mapping != nil && int64(len(m.mapping)) < tokens {
		return nil, fmt.Errorf("model.safetensors: mapping covers %d tokens, the tokenizer has %d", len(m.mapping), tokens)
	}
	if m.mapping == nil && nrows < tokens {
		return nil, fmt.Errorf("model.safetensors: %d embedding rows, the tokenizer has %d tokens", nrows, tokens)
	}
	return m, nil
}

// Model implements Embedder: the directory's name and a hash of its
// weights.
func (m *Model2Vec) Model() string { return m.name }

// Dim implements Embedder.
func (m *Model2Vec) Dim() int { return m.dim }

// Embed implements Embedder.
func (m *Model2Vec) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	var ids []int
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ids = m.tok.Encode(ids[:0], t, 0)
		v := make([]float32, m.dim)
		n := 0
		for _, id := range ids {
			if id == m.tok.unk {
				continue
			}
			if n == MaxTokens {
				break
			}
			n++
			row := int64(id)
			if m.mapping != nil {
				row = m.mapping[id]
			}
			w := float32(1)
			if m.weights != nil && id < len(m.weights) {
				w = m.weights[id]
			}
			r := m.rows[row*int64(m.dim) : (row+1)*int64(m.dim)]
			for j, x := range r {
				v[j] += w * x
			}
		}
		if n > 0 {
			scale := 1 / float32(n)
			if m.normalize {
				var s float64
				for _, x := range v {
					s += float64(x) * float64(x)
				}
				if s > 0 {
					scale = float32(1 / math.Sqrt(s))
				}
			}
			for j := range v {
				v[j] *= scale
			}
		}
		out[i] = v
	}
	return out, nil
}
