package window

// Entities: the names a conversation's messages share (paths, dotted and
// long identifiers, numbers), found with no model. A window uses them to
// describe what a reference stands for (the marker's Entities) and to
// choose which lines of evicted tool results stay in its digest.

// MinEntityBytes is the shortest entity.
const MinEntityBytes = 4

// entities calls yield with each entity of text, in order, repeats
// included. An entity is a maximal run of letters, digits, '_', '.', '/'
// and '-' (ASCII), less the punctuation at its ends, that is a path or a
// dotted name (it holds a '/' or '.' between other characters), an
// identifier of 6 characters or more, or a number of 3 digits or more; in
// any case at least MinEntityBytes long.
func entities(text string, yield func(string)) {
	for p := 0; p < len(text); {
		if !isEntityByte(text[p]) {
			p++
			continue
		}
		q := p
		for q < len(text) && isEntityByte(text[q]) {
			q++
		}
		if e := trimEntity(text[p:q]); isEntityName(e) {
			yield(e)
		}
		p = q
	}
}

func isEntityByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-'
}

// trimEntity drops the '.', '/' and '-' that end a sentence or open an
// option or a relative path.
func trimEntity(s string) string {
	for len(s) > 0 && (s[0] == '.' || s[0] == '-' || s[0] == '/') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == '.' || s[len(s)-1] == '-' || s[len(s)-1] == '/') {
		s = s[:len(s)-1]
	}
	return s
}

func isEntityName(s string) bool {
	if len(s) < MinEntityBytes {
		return false
	}
	digits := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
		case c == '.' || c == '/':
			return true // inside, after trimming: a path or a dotted name
		default:
			digits = false
		}
	}
	if digits {
		return len(s) >= 3
	}
	c := s[0]
	ident := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	return ident && len(s) >= 6
}
