package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The set names.
const (
	GoCommits   = "gocommits"
	RipGrep     = "ripgrep"
	LoCoMo      = "locomo"
	LongMemEval = "longmemeval"
	// Mixed is ripgrep's repository and LongMemEval's sessions in one
	// store, both sets' questions asked of it (Mix).
	Mixed = "mixed"
)

// SetNames lists the benchmark sets in the order engram eval runs them.
func SetNames() []string { return []string{GoCommits, RipGrep, LoCoMo, LongMemEval, Mixed} }

// Load loads the named benchmark set from the bench folder; goroot is the
// Go tree gocommits searches (its src directory is the corpus). A set
// whose files are missing is an error that wraps fs.ErrNotExist. Close the
// set when done: ripgrep's corpus is extracted to a temporary directory.
func Load(name, benchDir, goroot string) (*Set, error) {
	switch name {
	case GoCommits:
		return LoadCode(GoCommits, filepath.Join(benchDir, "gocommits", "queries.jsonl"), filepath.Join(goroot, "src"))
	case RipGrep:
		dir := filepath.Join(benchDir, "ripgrep")
		return LoadArchive(RipGrep, filepath.Join(dir, "queries.jsonl"), filepath.Join(dir, "ripgrep.tar.gz"), "ripgrep")
	case LoCoMo:
		return LoadLoCoMo(filepath.Join(benchDir, "locomo", "locomo10.json"))
	case LongMemEval:
		return LoadLongMemEval(filepath.Join(benchDir, "longmemeval", "longmemeval_oracle.json"))
	case Mixed:
		code, err := Load(RipGrep, benchDir, goroot)
		if err != nil {
			return nil, err
		}
		conv, err := Load(LongMemEval, benchDir, goroot)
		if err != nil {
			return nil, errors.Join(err, code.Close())
		}
		set, err := Mix(Mixed, code, conv)
		if err != nil {
			return nil, errors.Join(err, code.Close(), conv.Close())
		}
		return set, nil
	}
	return nil, fmt.Errorf("unknown benchmark set %q (known: %s)", name, strings.Join(SetNames(), ", "))
}

// locomoDate reads LoCoMo's session times, such as "1:56 pm on 8 May, 2023".
func locomoDate(s string) time.Time {
	t, err := time.Parse("3:04 pm on 2 January, 2006", strings.TrimSpace(s))
	if err != nil {
		return time.Time{}
	}
	return t
}

var evidenceSplit = regexp.MustCompile(`[;,\s]+`)

// LoadLoCoMo loads LoCoMo: each conversation is a corpus of its turns,
// and questions of categories 1 to 4 with evidence are asked against their
// conversation. Category 5 (adversarial) has no evidence to find and is
// left out, as the bench README says.
//
// Turns are stored as an agent's session is: the conversation's first
// speaker (speaker_a) is the user, the second (speaker_b) the assistant,
// and a turn's text is what was said, without the speaker's name (with
// the caption of a shared photo, as "[shares a photo: ...]").
func LoadLoCoMo(path string) (*Set, error) {
	data, err := readJSON(path)
	if err != nil {
		return nil, err
	}
	var samples []struct {
		SampleID     string                     `json:"sample_id"`
		Conversation map[string]json.RawMessage `json:"conversation"`
		QA           []struct {
			Question string   `json:"question"`
			Evidence []string `json:"evidence"`
			Category int      `json:"category"`
		} `json:"qa"`
	}
	if err := json.Unmarshal(data, &samples); err != nil {
		return nil, jsonError(path, data, err)
	}
	kinds := map[int]string{1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
	set := &Set{Name: LoCoMo, Corpora: map[string][]Item{}}
	for si, s := range samples {
		if s.SampleID == "" {
			return nil, fmt.Errorf("%s: conversation %d: sample_id is missing", path, si+1)
		}
		if _, ok := set.Corpora[s.SampleID]; ok {
			return nil, fmt.Errorf("%s: sample_id %q repeats", path, s.SampleID)
		}
		var items []Item
		known := map[string]bool{}
		roles := map[string]string{}
		for i, key := range []string{"speaker_a", "speaker_b"} {
			var name string
			if raw, ok := s.Conversation[key]; ok {
				if err := json.Unmarshal(raw, &name); err != nil {
					return nil, fmt.Errorf("%s: %s: %s: %w", path, s.SampleID, key, err)
				}
			}
			if name != "" {
				roles[name] = []string{"user", "assistant"}[i]
			}
		}
		for n := 1; ; n++ {
			raw, ok := s.Conversation[fmt.Sprintf("session_%d", n)]
			if !ok {
				break
			}
			var when string
			_ = json.Unmarshal(s.Conversation[fmt.Sprintf("session_%d_date_time", n)], &when)
			var turns []struct {
				Speaker string `json:"speaker"`
				DiaID   string `json:"dia_id"`
				Text    string `json:"text"`
				Caption string `json:"blip_caption"`
			}
			if err := json.Unmarshal(raw, &turns); err != nil {
				return nil, fmt.Errorf("%s: %s session %d: %w", path, s.SampleID, n, err)
			}
			for _, t := range turns {
				if t.DiaID == "" || known[t.DiaID] {
					return nil, fmt.Errorf("%s: %s session %d: dia_id %q is missing or repeats", path, s.SampleID, n, t.DiaID)
				}
				// Without speaker_a and speaker_b, the first to speak is
				// the user.
				role, ok := roles[t.Speaker]
				if !ok && len(roles) < 2 {
					role = []string{"user", "assistant"}[len(roles)]
					roles[t.Speaker] = role
				} else if !ok {
					return nil, fmt.Errorf("%s: %s turn %s: a third speaker %q", path, s.SampleID, t.DiaID, t.Speaker)
				}
				text := t.Text
				if t.Caption != "" {
					text += " [shares a photo: " + t.Caption + "]"
				}
				if strings.TrimSpace(text) == "" {
					continue // nothing to store (engram add refuses empty content)
				}
				items = append(items, Item{ID: t.DiaID, Text: text, Session: fmt.Sprintf("session_%d", n),
					Role: role, Time: locomoDate(when)})
				known[t.DiaID] = true
			}
		}
		set.Corpora[s.SampleID] = items
		for i, qa := range s.QA {
			if qa.Category == 5 {
				continue
			}
			var rel []string
			for _, ev := range qa.Evidence {
				for _, id := range evidenceSplit.Split(ev, -1) {
					if known[id] {
						rel = append(rel, id)
					}
				}
			}
			if len(rel) == 0 {
				continue
			}
			set.Questions = append(set.Questions, Question{ID: fmt.Sprintf("%s/%d", s.SampleID, i), Text: qa.Question,
				Corpus: s.SampleID, Relevant: dedupe(rel), Kind: kinds[qa.Category]})
		}
	}
	if len(set.Questions) == 0 {
		return nil, fmt.Errorf("%s: no questions with evidence", path)
	}
	return set, nil
}

// LoadLongMemEval loads the LongMemEval oracle split: all its sessions
// pooled into one corpus of turns, and every question that is not an
// abstention asked against it. Relevant items are the turns marked
// has_answer, or for the questions that mark none, every turn of their
// answer sessions. Turns keep their role (user or assistant) and are
// stored as what was said, as an agent's session is.
func LoadLongMemEval(path string) (*Set, error) {
	data, err := readJSON(path)
	if err != nil {
		return nil, err
	}
	var qs []struct {
		QuestionID   string   `json:"question_id"`
		QuestionType string   `json:"question_type"`
		Question     string   `json:"question"`
		Date         string   `json:"question_date"`
		Dates        []string `json:"haystack_dates"`
		SessionIDs   []string `json:"haystack_session_ids"`
		Sessions     [][]struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			HasAnswer bool   `json:"has_answer"`
		} `json:"haystack_sessions"`
		AnswerSessions []string `json:"answer_session_ids"`
	}
	if err := json.Unmarshal(data, &qs); err != nil {
		return nil, jsonError(path, data, err)
	}
	const corpus = LongMemEval
	set := &Set{Name: LongMemEval, Corpora: map[string][]Item{}}
	seen := map[string]bool{}
	turnsOf := map[string][]string{}
	stored := map[string]bool{}
	for qi, q := range qs {
		if q.QuestionID == "" {
			return nil, fmt.Errorf("%s: question %d: question_id is missing", path, qi+1)
		}
		if len(q.Sessions) != len(q.SessionIDs) {
			return nil, fmt.Errorf("%s: question %s: %d haystack_session_ids but %d haystack_sessions", path,
				q.QuestionID, len(q.SessionIDs), len(q.Sessions))
		}
		var rel []string
		for si, sid := range q.SessionIDs {
			var when time.Time
			if si < len(q.Dates) {
				when, _ = time.Parse(lmeDate, q.Dates[si])
			}
			for ti, t := range q.Sessions[si] {
				id := sid + ":" + strconv.Itoa(ti+1)
				if !seen[id] {
					seen[id] = true
					if t.Role != "user" && t.Role != "assistant" {
						return nil, fmt.Errorf("%s: question %s: session %s turn %d: role %q (want user or assistant)", path,
							q.QuestionID, sid, ti+1, t.Role)
					}
					if strings.TrimSpace(t.Content) != "" { // engram add refuses empty content
						stored[id] = true
						set.Corpora[corpus] = append(set.Corpora[corpus], Item{ID: id, Text: t.Content,
							Session: sid, Role: t.Role, Time: when})
						turnsOf[sid] = append(turnsOf[sid], id)
					}
				}
				if t.HasAnswer && stored[id] {
					rel = append(rel, id)
				}
			}
		}
		if strings.HasSuffix(q.QuestionID, "_abs") {
			continue
		}
		if len(rel) == 0 {
			for _, sid := range q.AnswerSessions {
				rel = append(rel, turnsOf[sid]...)
			}
		}
		if len(rel) == 0 {
			continue
		}
		asked, _ := time.Parse(lmeDate, q.Date)
		set.Questions = append(set.Questions, Question{ID: q.QuestionID, Text: q.Question, Corpus: corpus,
			Relevant: dedupe(rel), Kind: q.QuestionType, Time: asked, Sessions: q.SessionIDs})
	}
	if len(set.Questions) == 0 {
		return nil, fmt.Errorf("%s: no questions with evidence", path)
	}
	return set, nil
}

// LineError is a bad line of a set's file.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// readJSON reads a set's JSON file; an empty one is an error.
func readJSON(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", path)
	}
	return data, nil
}

// jsonError locates a decoding error of a set's file by line, when the
// decoder says where it stopped.
func jsonError(path string, data []byte, err error) error {
	off := int64(-1)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 {
		return fmt.Errorf("%s: %w", path, err)
	}
	line := 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n"))
	return &LineError{File: path, Line: line, Err: err}
}

// lmeDate is how LongMemEval writes times: 2023/05/24 (Wed) 10:29.
const lmeDate = "2006/01/02 (Mon) 15:04"

func dedupe(v []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range v {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
