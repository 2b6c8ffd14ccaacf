package eval

import (
	"errors"
	"fmt"
	"sort"
)

// Mix makes one set of a code set and a conversation set whose turns are
// one corpus (LongMemEval's pool): the repository and the sessions in one
// store, as a real project's store holds its code and its agents'
// sessions, and every question of both asked of it. Items are files and
// turns alike: a code question's ranking counts the turns it returns
// against it, and a conversation question's the files. Parts splits the
// set again for scoring, each part beside its own set's figures.
//
// The mixed set owns both sets' cleanup: Close it, not them. A turn ID
// that is also a file's path, or a question ID that both sets use, is an
// error: their items and questions must stay apart.
func Mix(name string, code, conv *Set) (*Set, error) {
	if !code.Code || conv.Code {
		return nil, fmt.Errorf("mix %s: want a code set and a conversation set, got %s and %s", name, code.Name, conv.Name)
	}
	if len(conv.Corpora) != 1 {
		return nil, fmt.Errorf("mix %s: %s has %d corpora; only a set asked of one pool of sessions mixes with a repository",
			name, conv.Name, len(conv.Corpora))
	}
	var turns []Item
	for _, items := range conv.Corpora {
		turns = items
	}
	files := map[string]bool{}
	ids := map[string]string{}
	for _, q := range code.Questions {
		for _, p := range q.Relevant {
			files[p] = true
		}
		ids[q.ID] = code.Name
	}
	for _, it := range turns {
		if files[it.ID] {
			return nil, fmt.Errorf("mix %s: turn %q of %s is also a relevant file of %s", name, it.ID, conv.Name, code.Name)
		}
	}
	set := &Set{Name: name, Code: true, Dir: code.Dir, Corpora: map[string][]Item{Repo: turns}}
	for _, q := range code.Questions {
		q.Part = code.Name
		set.Questions = append(set.Questions, q)
	}
	for _, q := range conv.Questions {
		if ids[q.ID] != "" {
			return nil, fmt.Errorf("mix %s: question %q is in both %s and %s", name, q.ID, code.Name, conv.Name)
		}
		q.Corpus, q.Part = Repo, conv.Name
		set.Questions = append(set.Questions, q)
	}
	set.cleanup = func() error { return errors.Join(code.Close(), conv.Close()) }
	set.conv = map[string]bool{conv.Name: true}
	return set, nil
}

// Parts returns a set's parts, each scored on its own: a mixed set's
// code questions and conversation questions (see Mix), each a set named
// "mixed/PART" that shares the mixed set's corpus and is Code for the
// code part only. Any other set is its own one part.
func (s *Set) Parts() []*Set {
	byPart := map[string][]Question{}
	for _, q := range s.Questions {
		byPart[q.Part] = append(byPart[q.Part], q)
	}
	if len(byPart) == 1 && byPart[""] != nil {
		return []*Set{s}
	}
	names := make([]string, 0, len(byPart))
	for p := range byPart {
		names = append(names, p)
	}
	sort.Strings(names)
	out := make([]*Set, 0, len(names))
	for _, p := range names {
		out = append(out, &Set{Name: s.Name + "/" + p, Code: !s.conv[p], Dir: s.Dir, Corpora: s.Corpora,
			Questions: byPart[p], part: true})
	}
	return out
}

// Mixed reports whether a set, or the set a part is of, holds code and
// conversations in one store (see Mix).
func (s *Set) Mixed() bool { return s.part || len(s.conv) > 0 }
