package terms

import (
	"encoding/binary"
	"slices"
	"strings"
)

// Term sets. A file of more than one chunk keeps the set of its index
// terms in its store, so that a search can tell which of a query's words
// the file holds anywhere without reading and tokenizing it: the file a
// change touches often holds one query word in one function and another
// in the next, and no single chunk holds them all. Other content
// (messages, tool results) keeps none: search does not ask about it, and
// on a conversation store the sets would add a sixth to its size. The set
// is the sorted, distinct 32-bit FNV-1a hashes of the terms of its
// chunks' full-text bodies (Append), four bytes a term: about 2 KB for a
// typical source file, where its content is 13 KB. Two terms share a hash
// with odds of about one in a million for a file of 4,000 distinct terms,
// and a shared hash only makes the entry seem to hold a word it does not.

// Set returns the term set of a file whose chunks' full-text bodies
// are given, or nil for a file of one chunk: its chunk is all of it.
func Set(bodies []string) []byte {
	if len(bodies) < 2 {
		return nil
	}
	seen := map[uint32]bool{}
	for _, b := range bodies {
		for t := range strings.FieldsSeq(b) {
			seen[termHash(t)] = true
		}
	}
	hashes := make([]uint32, 0, len(seen))
	for h := range seen {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	out := make([]byte, 4*len(hashes))
	for i, h := range hashes {
		binary.LittleEndian.PutUint32(out[4*i:], h)
	}
	return out
}

// termHash is 32-bit FNV-1a.
func termHash(t string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(t); i++ {
		h ^= uint32(t[i])
		h *= 16777619
	}
	return h
}

// SetHas reports whether the term set holds t.
func SetHas(set []byte, t string) bool {
	want := termHash(t)
	lo, hi := 0, len(set)/4
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch h := binary.LittleEndian.Uint32(set[4*m:]); {
		case h == want:
			return true
		case h < want:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}
