// Package embed turns text into vectors for semantic search, behind one
// interface, Embedder, with four kinds of model:
//
//   - Corpus, the offline default: term vectors learned from the store's
//     own chunks (package lsa), nothing to download;
//   - Model2Vec, pretrained static embeddings (safetensors and a WordPiece
//     tokenizer.json) loaded from a local directory;
//   - Ollama's /api/embed and any OpenAI-compatible /v1/embeddings
//     endpoint, over HTTP with batching, bounded concurrency, retries and
//     timeouts.
//
// Vectors are stored under the embedder's Model name, which names the
// exact model (a retrained corpus model or replaced model files get a new
// name), so vectors of different models are never compared. Worker embeds
// the chunks the store lists as pending, in the background, resumably.
package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Embedder turns texts into vectors.
type Embedder interface {
	// Model names the model exactly: vectors are stored under this name.
	Model() string
	// Dim is the number of dimensions of the vectors.
	Dim() int
	// Embed returns one unit-length vector per text, in order. A text the
	// model can say nothing about gets a zero vector.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ErrBadVector is returned for vectors that cannot be used: the wrong
// count or dimension, NaN or infinite values.
var ErrBadVector = errors.New("bad vector")

// Check validates an embedder's answer for n texts and normalises each
// vector to unit length in place, so that dot products are cosines.
func Check(vecs [][]float32, n, dim int) error {
	if len(vecs) != n {
		return fmt.Errorf("%w: %d vectors for %d texts", ErrBadVector, len(vecs), n)
	}
	for i, v := range vecs {
		if len(v) != dim {
			return fmt.Errorf("%w: vector %d has %d dimensions, want %d", ErrBadVector, i, len(v), dim)
		}
		var s float64
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%w: vector %d holds NaN or Inf", ErrBadVector, i)
			}
			s += float64(x) * float64(x)
		}
		if s == 0 {
			continue
		}
		inv := float32(1 / math.Sqrt(s))
		for j := range v {
			v[j] *= inv
		}
	}
	return nil
}

// Checked wraps an embedder so that every answer passes Check.
func Checked(e Embedder) Embedder { return checked{e} }

type checked struct{ Embedder }

func (c checked) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vecs, err := c.Embedder.Embed(ctx, texts)
	if err != nil {
		return nil, err
	}
	if err := Check(vecs, len(texts), c.Dim()); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Model(), err)
	}
	return vecs, nil
}
