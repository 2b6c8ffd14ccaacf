package terms

import (
	"hash/maphash"
	"sync"

	"github.com/kljensen/snowball/english"
)

// Words are stemmed with the Snowball English stemmer (Porter2), so that
// "parsing", "parsed" and "parses" all index as "pars". Only words of 3 to
// maxStemBytes ASCII letters are stemmed: digits, identifiers' wholes and
// other scripts are kept as they are.
const maxStemBytes = 32

// Stemming costs about 0.7 µs a word and words repeat a great deal, so
// stems are cached: a set of shards, each a map under its own lock,
// cleared when it grows past stemShardMax.
const (
	stemShards   = 32
	stemShardMax = 1 << 14
)

type stemShard struct {
	mu sync.RWMutex // guards m
	m  map[string]string
}

var (
	stemCache [stemShards]stemShard
	stemSeed  = maphash.MakeSeed()
)

// stem returns the stem of a lower-case word, or false if the word is not
// one that is stemmed or stems to itself.
func stem(w []byte) (string, bool) {
	if len(w) < 3 || len(w) > maxStemBytes {
		return "", false
	}
	for _, c := range w {
		if c < 'a' || c > 'z' {
			return "", false
		}
	}
	sh := &stemCache[maphash.Bytes(stemSeed, w)%stemShards]
	sh.mu.RLock()
	st, ok := sh.m[string(w)]
	sh.mu.RUnlock()
	if !ok {
		word := string(w)
		st = english.Stem(word, true)
		sh.mu.Lock()
		if sh.m == nil || len(sh.m) >= stemShardMax {
			sh.m = make(map[string]string, 1024)
		}
		sh.m[word] = st
		sh.mu.Unlock()
	}
	return st, len(st) != len(w) || st != string(w)
}
