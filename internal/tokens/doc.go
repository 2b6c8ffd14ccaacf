// Package tokens counts tokens exactly as OpenAI's tiktoken does, offline,
// for the o200k_base and cl100k_base encodings, and knows the context
// windows of current models.
//
// Start with Get (or MustGet) and Encoding.Count. Counts are identical to
// the reference tokenizer's encode_ordinary: testdata holds fixtures whose
// expected counts come from npm tiktoken (testdata/gen.mjs regenerates
// them). The vocabulary comes from github.com/tiktoken-go/tokenizer; the
// pre-tokenizer and the byte-pair merge are this package's own, because the
// library's splitter differs from the reference on whitespace-only lines
// (split.go says where). Pieces are merged exactly however long they are:
// from 64 KiB on by a search in linear time (long.go), where the reference
// takes quadratic time.
//
// Catalog maps model names to context windows and encodings. Models of
// providers whose tokenizers are not public (Anthropic, Google, Meta) are
// counted with o200k_base and flagged as approximate.
package tokens
