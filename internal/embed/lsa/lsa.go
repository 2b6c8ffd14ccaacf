// Package lsa is engram's offline embedder: term vectors learned from the
// user's own corpus by latent semantic analysis, so that semantic recall
// needs no model download and no network.
//
// Train builds a term-by-document matrix of TF-IDF weights over the corpus
// (terms as package terms makes them: stemmed words and identifier parts),
// keeps the terms that occur in at least MinDF documents and at most
// MaxDFRatio of them, and reduces it to Dim dimensions with a randomized
// SVD (Halko, Martinsson and Tropp 2011: a Gaussian sketch, power
// iterations, and an exact eigendecomposition of the small projected
// matrix). A text's vector is the TF-IDF-weighted sum of its terms'
// vectors (LSA fold-in), each dimension scaled by the singular value to the
// power Scale, then normalised: texts that use words which co-occur in the
// corpus land near each other even when they share no word.
package lsa

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/viterin/vek"
)

// Defaults for Options.
const (
	DefaultDim        = 128
	DefaultMaxVocab   = 60000
	DefaultMinDF      = 2
	DefaultMaxDFRatio = 0.5
	DefaultPower      = 3
)

// Options configure training. The zero value uses the defaults.
type Options struct {
	// Dim is the number of dimensions of the vectors.
	Dim int
	// MaxVocab keeps the most frequent terms, by document frequency.
	MaxVocab int
	// MinDF drops terms that occur in fewer documents.
	MinDF int
	// MaxDFRatio drops terms that occur in more than this share of
	// documents: they carry no topic.
	MaxDFRatio float64
	// Power is the number of power iterations of the randomized SVD.
	Power int
	// Scale weights each dimension by the singular value to this power:
	// 1 is classic LSA, 0 (the default, and what engram eval measured)
	// weighs all dimensions alike, so that the few dimensions of the
	// corpus's commonest themes do not drown the rest.
	Scale float64
	// Seed makes training deterministic.
	Seed uint64
}

func (o *Options) defaults() {
	if o.Dim <= 0 {
		o.Dim = DefaultDim
	}
	if o.MaxVocab <= 0 {
		o.MaxVocab = DefaultMaxVocab
	}
	if o.MinDF <= 0 {
		o.MinDF = DefaultMinDF
	}
	if o.MaxDFRatio <= 0 {
		o.MaxDFRatio = DefaultMaxDFRatio
	}
	if o.Power <= 0 {
		o.Power = DefaultPower
	}
	if o.Scale < 0 {
		o.Scale = 0
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Model maps terms to vectors. It is safe for concurrent use.
type Model struct {
	dim   int
	vocab map[string]int32
	idf   []float32
	// vecs holds the term vectors, dim per term, already scaled.
	vecs []float32
	// Docs is the number of documents trained on.
	Docs int
}

// ErrTooSmall is returned when a corpus is too small to learn from.
var ErrTooSmall = errors.New("corpus too small to train on")

// MinDocs is the fewest documents Train learns from.
const MinDocs = 20

// Train learns a model from documents, each a list of terms.
func Train(docs [][]string, opts Options) (*Model, error) {
	opts.defaults()
	if len(docs) < MinDocs {
		return nil, fmt.Errorf("%w: %d documents, need %d", ErrTooSmall, len(docs), MinDocs)
	}
	// Document frequencies, and the vocabulary: terms in at least MinDF and
	// at most MaxDFRatio of the documents, the most frequent MaxVocab.
	df := map[string]int{}
	for _, d := range docs {
		seen := map[string]bool{}
		for _, t := range d {
			if !seen[t] {
				seen[t] = true
				df[t]++
			}
		}
	}
	maxDF := int(opts.MaxDFRatio * float64(len(docs)))
	type tf struct {
		t string
		n int
	}
	var cands []tf
	for t, n := range df {
		if n >= opts.MinDF && n <= max(maxDF, opts.MinDF) {
			cands = append(cands, tf{t, n})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].n != cands[j].n {
			return cands[i].n > cands[j].n
		}
		return cands[i].t < cands[j].t
	})
	cands = cands[:min(len(cands), opts.MaxVocab)]
	dim := min(opts.Dim, len(cands)-1, len(docs)-1)
	if dim < 2 {
		return nil, fmt.Errorf("%w: %d usable terms", ErrTooSmall, len(cands))
	}
	m := &Model{dim: dim, vocab: make(map[string]int32, len(cands)), idf: make([]float32, len(cands)), Docs: len(docs)}
	for i, c := range cands {
		m.vocab[c.t] = int32(i)
		m.idf[i] = float32(math.Log(float64(len(docs)) / float64(c.n)))
	}

	a := m.matrix(docs)
	u, s := randomizedSVD(a, len(cands), dim, opts.Power, opts.Seed)
	m.vecs = make([]float32, len(cands)*dim)
	for i := range len(cands) {
		for j := range dim {
			m.vecs[i*dim+j] = float32(u[i*dim+j] * math.Pow(s[j], opts.Scale))
		}
	}
	return m, nil
}

// Dim returns the number of dimensions.
func (m *Model) Dim() int { return m.dim }

// Vocab returns the number of terms the model knows.
func (m *Model) Vocab() int { return len(m.vocab) }

// Knows reports whether term is in the model's vocabulary.
func (m *Model) Knows(term string) bool {
	_, ok := m.vocab[term]
	return ok
}

// Embed returns the normalised vector of a text given as terms, or a zero
// vector if the model knows none of them.
func (m *Model) Embed(terms []string) []float32 {
	out := make([]float32, m.dim)
	c := counts(terms)
	for _, t := range terms { // in text order, so that sums are deterministic
		n := c[t]
		if n == 0 {
			continue
		}
		c[t] = 0
		i, ok := m.vocab[t]
		if !ok {
			continue
		}
		w := float32(1+math.Log(float64(n))) * m.idf[i]
		row := m.vecs[int(i)*m.dim : int(i+1)*m.dim]
		for j, v := range row {
			out[j] += w * v
		}
	}
	normalize(out)
	return out
}

func counts(terms []string) map[string]int {
	c := make(map[string]int, len(terms))
	for _, t := range terms {
		c[t]++
	}
	return c
}

func normalize(v []float32) {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}

// csr is a sparse matrix by rows: documents by rows, terms as columns.
type csr struct {
	rows, cols int
	ptr        []int
	idx        []int32
	val        []float64
}

// matrix builds the document-by-term matrix of TF-IDF weights, each
// document's row normalised.
func (m *Model) matrix(docs [][]string) *csr {
	a := &csr{rows: len(docs), cols: len(m.vocab), ptr: make([]int, 1, len(docs)+1)}
	type entry struct {
		i int32
		w float64
	}
	var row []entry
	for _, d := range docs {
		start := len(a.idx)
		// A row's entries in the vocabulary's order, not the map's: the
		// sums below then add in the same order every time, and the same
		// documents train the same model to the bit.
		row = row[:0]
		for t, n := range counts(d) {
			if i, ok := m.vocab[t]; ok {
				row = append(row, entry{i, (1 + math.Log(float64(n))) * float64(m.idf[i])})
			}
		}
		slices.SortFunc(row, func(x, y entry) int { return cmp.Compare(x.i, y.i) })
		var norm float64
		for _, e := range row {
			a.idx = append(a.idx, e.i)
			a.val = append(a.val, e.w)
			norm += e.w * e.w
		}
		if norm > 0 {
			inv := 1 / math.Sqrt(norm)
			for k := start; k < len(a.val); k++ {
				a.val[k] *= inv
			}
		}
		a.ptr = append(a.ptr, len(a.idx))
	}
	return a
}

// mulT computes out = Aᵀ x for x with rows(A) rows and l columns (row major),
// giving cols(A) rows.
func (a *csr) mulT(x []float64, l int) []float64 {
	out := make([]float64, a.cols*l)
	for r := range a.rows {
		xr := x[r*l : (r+1)*l]
		for k := a.ptr[r]; k < a.ptr[r+1]; k++ {
			v := a.val[k]
			o := out[int(a.idx[k])*l : int(a.idx[k]+1)*l]
			for j, xv := range xr {
				o[j] += v * xv
			}
		}
	}
	return out
}

// mul computes out = A y for y with cols(A) rows and l columns.
func (a *csr) mul(y []float64, l int) []float64 {
	out := make([]float64, a.rows*l)
	for r := range a.rows {
		o := out[r*l : (r+1)*l]
		for k := a.ptr[r]; k < a.ptr[r+1]; k++ {
			v := a.val[k]
			yr := y[int(a.idx[k])*l : int(a.idx[k]+1)*l]
			for j, yv := range yr {
				o[j] += v * yv
			}
		}
	}
	return out
}

// randomizedSVD returns the top k left singular vectors of the term space
// (Aᵀ's column space: terms × k, row major) and the singular values.
func randomizedSVD(a *csr, terms, k, power int, seed uint64) ([]float64, []float64) {
	l := k + min(k, 20) // oversampling
	rng := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	// Sketch the term space: Y = Aᵀ Ω, with Ω documents × l Gaussian.
	omega := make([]float64, a.rows*l)
	for i := range omega {
		omega[i] = rng.NormFloat64()
	}
	// Between the products one CholeskyQR pass keeps the columns apart;
	// the last basis gets the second pass that makes it orthonormal to
	// working precision.
	y := a.mulT(omega, l)
	orthonormalize(y, terms, l, 1)
	for p := range power {
		z := a.mul(y, l) // documents × l
		orthonormalize(z, a.rows, l, 1)
		y = a.mulT(z, l)
		passes := 1
		if p == power-1 {
			passes = 2
		}
		orthonormalize(y, terms, l, passes)
	}
	// B = Yᵀ Aᵀ (l × documents); the eigenvectors of B Bᵀ rotate Y onto the
	// singular vectors.
	bt := a.mul(y, l) // documents × l, = Bᵀ
	g := make([]float64, l*l)
	for r := range a.rows {
		row := bt[r*l : (r+1)*l]
		for i, vi := range row {
			if vi == 0 {
				continue
			}
			gi := g[i*l : (i+1)*l]
			for j, vj := range row {
				gi[j] += vi * vj
			}
		}
	}
	vals, vecs := symmetricEigen(g, l)
	// Order by eigenvalue, largest first, and keep k.
	order := make([]int, l)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return vals[order[i]] > vals[order[j]] })
	u := make([]float64, terms*k)
	s := make([]float64, k)
	rot := make([]float64, k*l) // row c: eigenvector order[c]
	for c := range k {
		e := order[c]
		s[c] = math.Sqrt(max(vals[e], 0))
		for i := range l {
			rot[c*l+i] = vecs[i*l+e]
		}
	}
	parallelRanges(terms, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			yt := y[t*l : (t+1)*l]
			for c := range k {
				u[t*k+c] = vek.Dot(yt, rot[c*l:(c+1)*l])
			}
		}
	})
	return u, s
}

// orthonormalize makes the l columns of the n × l row-major matrix x
// orthonormal, by CholeskyQR: the Gram matrix XᵀX is factored as RᵀR and X
// replaced by X R⁻¹; two passes (CholeskyQR2) are orthonormal to working
// precision. The Gram matrix is built from the columns (the transpose of
// x) and X R⁻¹ row by row, both as SIMD dot products shared among the
// cores: on a corpus of 20,000 documents and 60,000 terms this is most of
// training. Columns that are (near) linearly dependent are zeroed.
func orthonormalize(x []float64, n, l, passes int) {
	xt := make([]float64, n*l) // l × n: the columns of x
	col := func(c int) []float64 { return xt[c*n : (c+1)*n] }
	for range passes {
		for i := range n {
			for c, v := range x[i*l : (i+1)*l] {
				xt[c*n+i] = v
			}
		}
		g := make([]float64, l*l)
		parallel(l, func(a int) {
			ca := col(a)
			for b := a; b < l; b++ {
				g[a*l+b] = vek.Dot(ca, col(b))
			}
		})
		// Cholesky G = RᵀR, R upper triangular; a non-positive pivot marks
		// a dependent column, which is dropped (its column of R⁻¹ zero).
		r := make([]float64, l*l)
		dead := make([]bool, l)
		for j := range l {
			sum := g[j*l+j]
			for k := range j {
				sum -= r[k*l+j] * r[k*l+j]
			}
			if sum <= 1e-12*max(g[j*l+j], 1e-300) || sum <= 0 {
				dead[j] = true
				continue
			}
			d := math.Sqrt(sum)
			r[j*l+j] = d
			for c := j + 1; c < l; c++ {
				v := g[j*l+c]
				for k := range j {
					v -= r[k*l+j] * r[k*l+c]
				}
				r[j*l+c] = v / d
			}
		}
		// Row i of X R⁻¹: entry c is row i dotted with column c of R⁻¹
		// (rows k <= c), kept contiguous in invT.
		inv := invertUpper(r, dead, l)
		invT := make([]float64, l*l)
		for k := range l {
			for c := range l {
				invT[c*l+k] = inv[k*l+c]
			}
		}
		parallelRanges(n, func(lo, hi int) {
			tmp := make([]float64, l)
			for i := lo; i < hi; i++ {
				row := x[i*l : (i+1)*l]
				for c := range l {
					tmp[c] = vek.Dot(row[:c+1], invT[c*l:c*l+c+1])
				}
				copy(row, tmp)
			}
		})
	}
}

// invertUpper inverts the upper triangular l × l matrix r, leaving the
// rows and columns of dead pivots zero.
func invertUpper(r []float64, dead []bool, l int) []float64 {
	inv := make([]float64, l*l)
	for c := range l {
		if dead[c] {
			continue
		}
		// Solve R x = e_c from the bottom row up; x is column c of R⁻¹.
		for i := c; i >= 0; i-- {
			if dead[i] {
				continue
			}
			v := 0.0
			if i == c {
				v = 1
			}
			for k := i + 1; k <= c; k++ {
				v -= r[i*l+k] * inv[k*l+c]
			}
			inv[i*l+c] = v / r[i*l+i]
		}
	}
	return inv
}

// parallelRanges splits [0, n) into one range per core and calls fn on
// each, in parallel.
func parallelRanges(n int, fn func(lo, hi int)) {
	w := max(1, min(runtime.GOMAXPROCS(0), n/256))
	var wg sync.WaitGroup
	for p := range w {
		wg.Go(func() { fn(p*n/w, (p+1)*n/w) })
	}
	wg.Wait()
}

// parallel calls fn(0) to fn(n-1) on all cores.
func parallel(n int, fn func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// symmetricEigen diagonalises the symmetric n × n matrix a by cyclic Jacobi
// rotations and returns its eigenvalues and eigenvectors (as columns).
func symmetricEigen(a []float64, n int) ([]float64, []float64) {
	v := make([]float64, n*n)
	for i := range n {
		v[i*n+i] = 1
	}
	for sweep := 0; sweep < 60; sweep++ {
		var off float64
		for i := range n {
			for j := i + 1; j < n; j++ {
				off += a[i*n+j] * a[i*n+j]
			}
		}
		if off < 1e-22 {
			break
		}
		for p := range n {
			for q := p + 1; q < n; q++ {
				apq := a[p*n+q]
				if math.Abs(apq) < 1e-300 {
					continue
				}
				theta := (a[q*n+q] - a[p*n+p]) / (2 * apq)
				t := 1 / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				if theta < 0 {
					t = -t
				}
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for k := range n {
					akp, akq := a[k*n+p], a[k*n+q]
					a[k*n+p] = c*akp - s*akq
					a[k*n+q] = s*akp + c*akq
				}
				for k := range n {
					apk, aqk := a[p*n+k], a[q*n+k]
					a[p*n+k] = c*apk - s*aqk
					a[q*n+k] = s*apk + c*aqk
				}
				for k := range n {
					vkp, vkq := v[k*n+p], v[k*n+q]
					v[k*n+p] = c*vkp - s*vkq
					v[k*n+q] = s*vkp + c*vkq
				}
			}
		}
	}
	vals := make([]float64, n)
	for i := range n {
		vals[i] = a[i*n+i]
	}
	return vals, v
}

// MarshalBinary encodes the model.
func (m *Model) MarshalBinary() ([]byte, error) {
	terms := make([]string, len(m.vocab))
	for t, i := range m.vocab {
		terms[i] = t
	}
	var b []byte
	b = binary.AppendUvarint(b, 1) // format version
	b = binary.AppendUvarint(b, uint64(m.dim))
	b = binary.AppendUvarint(b, uint64(m.Docs))
	b = binary.AppendUvarint(b, uint64(len(terms)))
	for i, t := range terms {
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(m.idf[i]))
	}
	for _, v := range m.vecs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b, nil
}

// UnmarshalBinary decodes a model encoded by MarshalBinary.
func (m *Model) UnmarshalBinary(b []byte) error {
	bad := errors.New("lsa: malformed model")
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, bad
		}
		b = b[n:]
		return v, nil
	}
	version, err := next()
	if err != nil || version != 1 {
		return fmt.Errorf("lsa: model format %d is not known", version)
	}
	dim, err1 := next()
	docs, err2 := next()
	n, err3 := next()
	if err := errors.Join(err1, err2, err3); err != nil || dim == 0 || dim > 4096 || n > 1<<24 {
		return bad
	}
	m.dim, m.Docs = int(dim), int(docs)
	m.vocab = make(map[string]int32, n)
	m.idf = make([]float32, n)
	for i := range int(n) {
		l, err := next()
		if err != nil || uint64(len(b)) < l+4 {
			return bad
		}
		m.vocab[string(b[:l])] = int32(i)
		m.idf[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[l:]))
		b = b[l+4:]
	}
	if uint64(len(b)) != 4*n*dim {
		return bad
	}
	m.vecs = make([]float32, n*dim)
	for i := range m.vecs {
		m.vecs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}
