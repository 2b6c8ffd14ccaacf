package postgres

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// Reading rows that several areas of the store share.

// occColumns are the columns scanOccurrence reads, from occurrences o
// joined with entries e.
const occColumns = `o.seq, e.id, o.session_id, o.agent_id, o.agent_type, o.type, o.turn, o.time,
	o.msg_id, o.parent_id, o.files, o.keywords, o.entities, o.metadata`

type scanner interface{ Scan(dest ...any) error }

func scanOccurrence(sc scanner, extra ...any) (store.Occurrence, error) {
	var (
		o                                  store.Occurrence
		typ                                string
		t, turn                            int64
		msgID, parentID                    *string
		files, keywords, entities, rawMeta *string
	)
	dest := append([]any{&o.Seq, &o.EntryID, &o.SessionID, &o.AgentID, &o.AgentType, &typ, &turn, &t,
		&msgID, &parentID, &files, &keywords, &entities, &rawMeta}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return o, err
	}
	o.Type = store.ContentType(typ)
	o.Turn = int(turn)
	o.Time = fromUnixNano(t)
	o.MsgID, o.ParentID = deref(msgID), deref(parentID)
	var err error
	if o.Files, err = decodeList(files); err != nil {
		return o, err
	}
	if o.Keywords, err = decodeList(keywords); err != nil {
		return o, err
	}
	if o.Entities, err = decodeList(entities); err != nil {
		return o, err
	}
	if rawMeta != nil {
		if err := json.Unmarshal([]byte(*rawMeta), &o.Metadata); err != nil {
			return o, fmt.Errorf("decode metadata of occurrence %d: %w", o.Seq, err)
		}
	}
	return o, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nullable is s, or NULL for "".
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jsonList is v as a JSON list, or NULL for none.
func jsonList(v []string) *string {
	if len(v) == 0 {
		return nil
	}
	b, _ := json.Marshal(v) // []string always marshals
	s := string(b)
	return &s
}

func decodeList(v *string) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(*v), &out); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	return out, nil
}

// chunkColumns are the columns scanChunk reads, from chunks c joined with
// entries e: the text is cut from the content.
const chunkColumns = `c.id, e.id, c.ordinal, c.start_byte, c.end_byte, c.start_line, c.end_line, c.token_count, c.symbols,
	substring(e.content FROM c.start_byte + 1 FOR c.end_byte - c.start_byte)`

func scanChunk(sc scanner, extra ...any) (store.Chunk, error) {
	var (
		c                                     store.Chunk
		ordinal, start, end, sLine, eLine, tc int32
		symbols                               *string
		text                                  []byte
	)
	dest := append([]any{&c.ID, &c.EntryID, &ordinal, &start, &end, &sLine, &eLine, &tc, &symbols, &text}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return c, err
	}
	c.Ordinal, c.Start, c.End, c.StartLine, c.EndLine, c.TokenCount = int(ordinal), int(start), int(end), int(sLine), int(eLine), int(tc)
	c.Text = string(text)
	var err error
	c.Symbols, err = decodeList(symbols)
	return c, err
}

// filterSQL renders a filter as a condition on occurrences o, its
// parameters added to a.
func filterSQL(f store.Filter, a *args) string {
	var conds []string
	if f.SessionID != "" {
		conds = append(conds, "o.session_id = "+a.add(f.SessionID))
	}
	if f.AgentID != "" {
		conds = append(conds, "o.agent_id = "+a.add(f.AgentID))
	}
	if f.AgentType != "" {
		conds = append(conds, "o.agent_type = "+a.add(f.AgentType))
	}
	if len(f.Types) > 0 {
		types := make([]string, len(f.Types))
		for i, t := range f.Types {
			types[i] = string(t)
		}
		conds = append(conds, "o.type = ANY("+a.add(types)+")")
	}
	if f.TurnFrom > 0 {
		conds = append(conds, "o.turn >= "+a.add(f.TurnFrom))
	}
	if f.TurnTo > 0 {
		conds = append(conds, "o.turn <= "+a.add(f.TurnTo))
	}
	if !f.Since.IsZero() {
		conds = append(conds, "o.time >= "+a.add(unixNano(f.Since)))
	}
	if !f.Until.IsZero() {
		conds = append(conds, "o.time <= "+a.add(unixNano(f.Until)))
	}
	if len(f.Paths) > 0 {
		var ors []string
		for _, p := range f.Paths {
			if strings.ContainsAny(p, "*?[") {
				ors = append(ors, "j.v ~ "+a.add(globRegexp(p)))
				continue
			}
			p = strings.TrimSuffix(p, "/")
			ors = append(ors, "j.v = "+a.add(p)+" OR starts_with(j.v, "+a.add(p+"/")+")")
		}
		conds = append(conds, "EXISTS (SELECT 1 FROM json_array_elements_text(o.files::json) j(v) WHERE "+strings.Join(ors, " OR ")+")")
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// globRegexp is the POSIX regular expression that matches what SQLite's
// GLOB pattern p matches: * any run, ? any one character, [...] a class
// ([^...] its complement), case-sensitive and anchored.
func globRegexp(p string) string {
	var b strings.Builder
	b.WriteByte('^')
	rs := []rune(p)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteByte('.')
		case '[':
			end := i + 1
			if end < len(rs) && rs[end] == '^' {
				end++
			}
			if end < len(rs) && rs[end] == ']' {
				end++
			}
			for end < len(rs) && rs[end] != ']' {
				end++
			}
			if end >= len(rs) { // no closing bracket: a literal [
				b.WriteString(`\[`)
				continue
			}
			class := string(rs[i+1 : end])
			b.WriteByte('[')
			for _, c := range class {
				if c == '\\' {
					b.WriteString(`\\`)
				} else {
					b.WriteRune(c)
				}
			}
			b.WriteByte(']')
			i = end
		default:
			if strings.ContainsRune(`\.+()|{}^$[]`, r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('$')
	return b.String()
}

// collectRows is pgx.CollectRows, except that no rows is a nil slice, as
// the SQLite backend returns it (an HTTP answer then says null, not [],
// whichever backend served it).
func collectRows[T any](rows pgx.Rows, fn pgx.RowToFunc[T]) ([]T, error) {
	out, err := pgx.CollectRows(rows, fn)
	if len(out) == 0 {
		out = nil
	}
	return out, err
}
