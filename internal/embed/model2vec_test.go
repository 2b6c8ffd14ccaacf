package embed

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testVocab is a tiny WordPiece vocabulary.
var testVocab = map[string]int{
	"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3, "##s": 4, ",": 5, "!": 6, "cafe": 7, "un": 8, "##known": 9, "日": 10,
}

func tokenizerFile(t *testing.T, model string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"version":       "1.0",
		"normalizer":    map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": nil, "lowercase": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"model": map[string]any{"type": model, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": testVocab},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type testTensor = struct {
	DType string
	Shape []int64
	Data  []byte
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// f16s encodes values that half precision holds exactly.
func f16s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		bits := math.Float32bits(x)
		sign := uint16(bits>>16) & 0x8000
		exp := int(bits>>23&0xff) - 127 + 15
		frac := uint16(bits>>13) & 0x3ff
		h := sign
		if x != 0 {
			h |= uint16(exp)<<10 | frac
		}
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	return b
}

// embeddingRows gives token i the row (i, 1, 0).
func embeddingRows(n int) []float32 {
	var v []float32
	for i := range n {
		v = append(v, float32(i), 1, 0)
	}
	return v
}

func writeModel(t *testing.T, tensors map[string]testTensor, config string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"model.safetensors": writeSafetensors(tensors),
		"tokenizer.json":    tokenizerFile(t, "WordPiece"),
		"config.json":       []byte(config),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestWordPiece(t *testing.T) {
	w, err := parseWordPiece(tokenizerFile(t, "WordPiece"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"Hello, WORLDS!", []int{2, 5, 3, 4, 6}},
		{"Café", []int{7}},                     // accents stripped, lower-cased
		{"unknown hello", []int{8, 9, 2}},      // word pieces
		{"helloq", []int{1}},                   // a word not covered is one [UNK]
		{"hello\x00 world\u200b", []int{2, 3}}, // control and format characters dropped
		{"hello\u200bworld", []int{1}},         // ... not turned into spaces
		{"日hello", []int{10, 2}},               // CJK characters are words of their own
		{strings.Repeat("a", 101), []int{1}},   // over max_input_chars_per_word
		{"  \t\n ", nil},
	} {
		got := w.Encode(nil, tc.text, 0)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := w.Encode(nil, "hello hello hello", 2); len(got) != 2 {
		t.Errorf("limit 2: %v", got)
	}
}

func TestModel2Vec(t *testing.T) {
	ctx := context.Background()
	n := len(testVocab)
	dir := writeModel(t, map[string]testTensor{
		"embeddings": {"F32", []int64{int64(n), 3}, f32s(embeddingRows(n)...)},
	}, `{"normalize": true}`)
	m, err := LoadModel2Vec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Dim() != 3 || !strings.HasPrefix(m.Model(), "model2vec-tiny-model-") {
		t.Errorf("Dim %d, Model %q", m.Dim(), m.Model())
	}
	vecs, err := m.Embed(ctx, []string{"hello world", "zzz", "hello qqq"})
	if err != nil {
		t.Fatal(err)
	}
	// hello (2,1,0) + world (3,1,0), mean (2.5,1,0), normalised.
	want := []float32{2.5, 1, 0}
	norm := float32(math.Sqrt(2.5*2.5 + 1))
	for j := range want {
		if math.Abs(float64(vecs[0][j]-want[j]/norm)) > 1e-6 {
			t.Fatalf("hello world = %v, want %v/%v", vecs[0], want, norm)
		}
	}
	if !slices.Equal(vecs[1], []float32{0, 0, 0}) {
		t.Errorf("only unknown words: %v, want zeros", vecs[1])
	}
	// [UNK] is left out of the mean: "hello qqq" is hello alone.
	if math.Abs(float64(vecs[2][0])-2/math.Sqrt(5)) > 1e-6 {
		t.Errorf("hello qqq = %v", vecs[2])
	}
	// Replacing the weights changes the model's name.
	dir2 := writeModel(t, map[string]testTensor{
		"embeddings": {"F32", []int64{int64(n), 3}, f32s(embeddingRows(n)...)},
		"weights":    {"F32", []int64{int64(n)}, f32s(make([]float32, n)...)},
	}, `{}`)
	m2, err := LoadModel2Vec(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Model() == m.Model() {
		t.Error("different weights, same model name")
	}
}

func TestModel2VecWeightsMappingHalf(t *testing.T) {
	n := len(testVocab)
	// Two rows; every token maps to row 1 except hello (row 0).
	mapping := make([]byte, 0, 4*n)
	for i := range n {
		r := int32(1)
		if i == testVocab["hello"] {
			r = 0
		}
		mapping = binary.LittleEndian.AppendUint32(mapping, uint32(r))
	}
	weights := make([]float32, n)
	for i := range weights {
		weights[i] = 1
	}
	weights[testVocab["world"]] = 3
	dir := writeModel(t, map[string]testTensor{
		"embeddings": {"F16", []int64{2, 2}, f16s(1, 0, 0, 0.5)},
		"weights":    {"F32", []int64{int64(n)}, f32s(weights...)},
		"mapping":    {"I32", []int64{int64(n)}, mapping},
	}, `{"normalize": false}`)
	m, err := LoadModel2Vec(dir)
	if err != nil {
		t.Fatal(err)
	}
	vecs, err := m.Embed(context.Background(), []string{"hello world"})
	if err != nil {
		t.Fatal(err)
	}
	// (1*(1,0) + 3*(0,0.5)) / 2, not normalised.
	if want := []float32{0.5, 0.75}; !slices.Equal(vecs[0], want) {
		t.Errorf("got %v, want %v", vecs[0], want)
	}
}

func TestModel2VecErrors(t *testing.T) {
	n := len(testVocab)
	good := map[string]testTensor{"embeddings": {"F32", []int64{int64(n), 3}, f32s(embeddingRows(n)...)}}
	check := func(name, dir, want string) {
		t.Helper()
		_, err := LoadModel2Vec(dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, want)
		}
	}
	check("missing directory", filepath.Join(t.TempDir(), "nope"), "no model.safetensors")

	dir := writeModel(t, good, `{}`)
	if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	check("missing tokenizer", dir, "no tokenizer.json")

	dir = writeModel(t, good, `{}`)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokenizerFile(t, "Unigram"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("unsupported tokenizer", dir, `model type "Unigram" is not supported`)

	check("bad config", writeModel(t, good, `{`), "config.json")
	check("too few rows", writeModel(t, map[string]testTensor{"embeddings": {"F32", []int64{3, 3}, f32s(embeddingRows(3)...)}}, `{}`),
		"3 embedding rows, the tokenizer has 11 tokens")
	check("no embeddings", writeModel(t, map[string]testTensor{"other": {"F32", []int64{1}, f32s(1)}}, `{}`), `no "embeddings" tensor`)
	check("1-D embeddings", writeModel(t, map[string]testTensor{"embeddings": {"F32", []int64{3}, f32s(1, 2, 3)}}, `{}`), "shape")
	bad := map[string]testTensor{
		"embeddings": good["embeddings"],
		"mapping":    {"I32", []int64{1}, binary.LittleEndian.AppendUint32(nil, 99)},
	}
	check("mapping out of range", writeModel(t, bad, `{}`), "mapping sends token 0 to row 99")

	dir = writeModel(t, good, `{}`)
	path := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"truncated":   b[:len(b)-5],
		"short":       b[:4],
		"huge header": append(binary.LittleEndian.AppendUint64(nil, 1<<40), b[8:]...),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		check(name, dir, "safetensors")
	}
}

func TestHalf(t *testing.T) {
	for bits, want := range map[uint16]float32{
		0x3c00: 1, 0xc000: -2, 0x3800: 0.5, 0x0000: 0, 0x7bff: 65504, 0x0001: 5.960464477539063e-08,
	} {
		if got := half(bits); got != want {
			t.Errorf("half(%#04x) = %v, want %v", bits, got, want)
		}
	}
	if !math.IsInf(float64(half(0x7c00)), 1) || !math.IsNaN(float64(half(0x7e00))) {
		t.Error("half: infinities and NaN")
	}
}
