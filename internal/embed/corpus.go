package embed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/terms"
)

// Corpus is the offline default embedder: term vectors learned from the
// store's own chunks by latent semantic analysis (package lsa). It needs
// no download and no network; it knows only the words of the corpus it was
// trained on, and is retrained as the corpus grows.
type Corpus struct {
	m    *lsa.Model
	name string
	data []byte
}

// CorpusPrefix begins the model name of every corpus-trained model.
const CorpusPrefix = "corpus-lsa"

// TrainCorpus learns a corpus model from texts.
func TrainCorpus(texts []string, opts lsa.Options) (*Corpus, error) {
	docs := make([][]string, len(texts))
	for i, t := range texts {
		docs[i] = terms.Content(t)
	}
	m, err := lsa.Train(docs, opts)
	if err != nil {
		return nil, fmt.Errorf("train corpus model: %w", err)
	}
	return newCorpus(m)
}

// LoadCorpus decodes a corpus model saved with MarshalBinary. The encoding
// is canonical (UnmarshalBinary takes nothing else), so data is the
// model's encoding as it stands, and its name is not worked out by
// encoding the model again: that was a third of loading one.
func LoadCorpus(data []byte) (*Corpus, error) {
	m := &lsa.Model{}
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("load corpus model: %w", err)
	}
	return corpusOf(m, data), nil
}

func newCorpus(m *lsa.Model) (*Corpus, error) {
	data, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return corpusOf(m, data), nil
}

// corpusOf names a model by its dimension and a hash of its encoding.
func corpusOf(m *lsa.Model, data []byte) *Corpus {
	sum := sha256.Sum256(data)
	return &Corpus{m: m, data: data, name: fmt.Sprintf("%s-%d-%s", CorpusPrefix, m.Dim(), hex.EncodeToString(sum[:6]))}
}

// MarshalBinary encodes the model for LoadCorpus.
func (c *Corpus) MarshalBinary() ([]byte, error) { return c.data, nil }

// Model implements Embedder: the dimension and a hash of the trained
// model, so that each training is a model of its own.
func (c *Corpus) Model() string { return c.name }

// Dim implements Embedder.
func (c *Corpus) Dim() int { return c.m.Dim() }

// Docs is the number of texts the model was trained on.
func (c *Corpus) Docs() int { return c.m.Docs }

// Vocab is the number of terms the model knows.
func (c *Corpus) Vocab() int { return c.m.Vocab() }

// Knows reports whether the model knows a term (as Terms makes them): its
// vocabulary is words of the corpus it was trained on, kept in its blob.
func (c *Corpus) Knows(term string) bool { return c.m.Knows(term) }

// Embed implements Embedder.
func (c *Corpus) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = c.m.Embed(terms.Content(t))
	}
	return out, nil
}
