package window

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

// A pipeline agent hands off (seed 000, "Pipeline Agent Handoff"): at its
// role's Handoff share a fresh instance of it takes over, in a new window
// of the same session, opened with a structured HandoffState built from
// the prior window (and the archivalist's session state, which the caller
// reads and gives as SessionFacts) and markers that expand back to every
// message of the prior window. The prior window stays as it is.

// HandoffLink names the handoff state a window was opened with: its index
// in the agent's lineage, its entry, and the agent it took over from.
type HandoffLink struct {
	Index int    `json:"index"`
	Entry string `json:"entry"`
	From  string `json:"from"`
}

// Handoff reasons.
const (
	// ReasonRequested: the handoff was asked for before the window was due.
	ReasonRequested = "requested"
)

// reasonDue is the reason of a handoff of a window past its threshold, as
// the seed writes it: "context_75%".
func reasonDue(share float64) string { return fmt.Sprintf("context_%d%%", int(share*100+0.5)) }

// HandoffState is what a new instance of an agent needs to carry on: one
// type for the six pipeline roles, the seed's common fields, and a part of
// its own only for a role whose seed structure differs in substance
// (the tester's failing tests, the orchestrator's agents, the guide's user
// preferences). It is stored as a handoff_state entry, as JSON.
type HandoffState struct {
	Session string `json:"session"`
	Role    string `json:"role"`
	// FromAgent is the agent that hands off, ToAgent the one that takes
	// over.
	FromAgent string `json:"from_agent"`
	ToAgent   string `json:"to_agent"`
	// Index is the handoff's place in the agent's lineage: 1 for the
	// first, the index of the state its window opened with plus one for
	// the next; Previous that state's entry.
	Index    int    `json:"handoff_index"`
	Previous string `json:"previous,omitempty"`
	// Reason is "context_75%" (the window was due) or "requested".
	Reason    string    `json:"handoff_reason"`
	CreatedAt time.Time `json:"created_at"`

	// Task is the original request, verbatim: the window's first user
	// prompt, or the archivalist's task.
	Task      string          `json:"task"`
	Objective string          `json:"objective,omitempty"`
	Progress  HandoffProgress `json:"progress"`
	Files     []HandoffFile   `json:"files"`
	Decisions []string        `json:"decisions"`
	Questions []string        `json:"open_questions"`
	Next      []string        `json:"next_steps"`
	Blockers  []string        `json:"blockers"`
	// Refs stand, together, for every message of the prior window, in
	// order: each expands back to its messages byte for byte.
	Refs []HandoffRef `json:"refs"`
	// Sources say what the state was built from: "window", and
	// "archivalist" when the session had state there.
	Sources []string `json:"sources"`

	Tester       *TesterHandoff       `json:"tester,omitempty"`
	Orchestrator *OrchestratorHandoff `json:"orchestrator,omitempty"`
	Guide        *GuideHandoff        `json:"guide,omitempty"`
}

// HandoffProgress is what is done and what was in hand.
type HandoffProgress struct {
	Done       []string `json:"done"`
	InProgress string   `json:"in_progress,omitempty"`
}

// HandoffFile is a file the prior agent touched: read, modified, created
// or deleted (the archivalist's statuses, or the tool that named it),
// to_read (the archivalist's files to read), or mentioned (named in a
// tool's result).
type HandoffFile struct {
	Path    string `json:"path"`
	Status  string `json:"status"`
	Summary string `json:"summary,omitempty"`
}

// HandoffRef is a reference to a run of the prior window's messages.
type HandoffRef struct {
	ID     string `json:"id"`
	Marker string `json:"marker"`
	// From and To are the places of its first and last message in the
	// prior window's ledger.
	From     int `json:"from"`
	To       int `json:"to"`
	Messages int `json:"messages"`
	Tokens   int `json:"tokens"`
}

// TesterHandoff is the tester's own part: the tests failing in the latest
// results it saw.
type TesterHandoff struct {
	FailingTests []string `json:"failing_tests"`
}

// OrchestratorHandoff is the orchestrator's own part: the other agents'
// windows of the session and how full they are.
type OrchestratorHandoff struct {
	Agents []AgentSnapshot `json:"agents"`
}

// AgentSnapshot is where another agent's window stands.
type AgentSnapshot struct {
	Agent      string `json:"agent"`
	Role       string `json:"role"`
	Used       int    `json:"used"`
	Budget     int    `json:"budget"`
	HandoffDue bool   `json:"handoff_due,omitempty"`
}

// GuideHandoff is the guide's own part: what the user wants and rejects
// (the archivalist's preferences) and the topics of the latest messages.
type GuideHandoff struct {
	Wants   []string `json:"wants"`
	Rejects []string `json:"rejects"`
	Topics  []string `json:"topics"`
}

// SessionFacts are the archivalist's state of the session, as a handoff
// takes it (the caller reads it: archive.ReadSession and the session's
// decisions). Where it speaks, it wins over what the window says.
type SessionFacts struct {
	Task, Objective, Current string
	Done, Next, Blockers     []string
	FilesToRead              []string
	Files                    []HandoffFile
	Decisions                []string
	Wants, Rejects           []string
}

// empty reports whether the facts say nothing.
func (f *SessionFacts) empty() bool {
	return f == nil || f.Task == "" && f.Objective == "" && f.Current == "" && len(f.Done) == 0 && len(f.Next) == 0 &&
		len(f.Blockers) == 0 && len(f.FilesToRead) == 0 && len(f.Files) == 0 && len(f.Decisions) == 0 && len(f.Wants) == 0 && len(f.Rejects) == 0
}

// Limits of what a state takes from a window.
const (
	// handoffLatest is how many of the latest messages decisions,
	// questions, next steps and failing tests are read from.
	handoffLatest = 60
	// handoffItems caps each list; handoffFiles the files.
	handoffItems = 12
	handoffFiles = 40
	// handoffLineBytes caps a line taken from a message; handoffTaskBytes
	// the task.
	handoffLineBytes = 300
	handoffTaskBytes = 16 << 10
)

// BuildHandoff builds a handoff state, with no model, from a window's
// messages (all of them, in order) and the archivalist's facts (nil for
// none): the task is the first user prompt; files are the paths named in
// tool calls (read, or modified by a tool that writes) and results
// (mentioned); decisions, open questions, next steps, blockers and what
// is done are lines of the agent's latest messages in the language of each
// (see classify). The facts win where they speak: their task, objective,
// current work, what is done, next steps and blockers replace the
// window's; their files and decisions come first, the window's after.
// The caller sets the handoff's names, index, reason, time and refs.
func BuildHandoff(role string, msgs []Message, facts *SessionFacts) HandoffState {
	st := HandoffState{Role: role, Progress: HandoffProgress{Done: []string{}}, Files: []HandoffFile{}, Decisions: []string{},
		Questions: []string{}, Next: []string{}, Blockers: []string{}, Refs: []HandoffRef{}, Sources: []string{"window"}}
	prompts := userPrompts(msgs)
	if len(prompts) > 0 {
		st.Task = clipText(prompts[0], handoffTaskBytes)
	}
	if len(prompts) > 1 {
		st.Progress.InProgress = headLine(prompts[len(prompts)-1])
	}
	st.Files = filesOf(msgs)
	lines := latestLines(msgs[max(0, len(msgs)-handoffLatest):])
	for _, l := range lines {
		switch classify(l) {
		case lineDecision:
			st.Decisions = appendItem(st.Decisions, l)
		case lineQuestion:
			st.Questions = appendItem(st.Questions, l)
		case lineNext:
			st.Next = appendItem(st.Next, l)
		case lineBlocker:
			st.Blockers = appendItem(st.Blockers, l)
		case lineDone:
			st.Progress.Done = appendItem(st.Progress.Done, l)
		}
	}
	switch strings.ToLower(role) {
	case "tester":
		st.Tester = &TesterHandoff{FailingTests: failingTests(msgs[max(0, len(msgs)-handoffLatest):])}
	case "guide":
		st.Guide = &GuideHandoff{Wants: []string{}, Rejects: []string{}, Topics: topicsOf(msgs[max(0, len(msgs)-handoffLatest):])}
	}
	if facts.empty() {
		return st
	}
	st.Sources = append(st.Sources, "archivalist")
	st.Task = cmp.Or(facts.Task, st.Task)
	st.Objective = facts.Objective
	st.Progress.InProgress = cmp.Or(facts.Current, st.Progress.InProgress)
	if len(facts.Done) > 0 {
		st.Progress.Done = slices.Clone(facts.Done)
	}
	if len(facts.Next) > 0 {
		st.Next = slices.Clone(facts.Next)
	}
	if len(facts.Blockers) > 0 {
		st.Blockers = slices.Clone(facts.Blockers)
	}
	files := append([]HandoffFile{}, facts.Files...)
	for _, p := range facts.FilesToRead {
		files = append(files, HandoffFile{Path: p, Status: "to_read"})
	}
	for _, f := range st.Files {
		if !slices.ContainsFunc(files, func(g HandoffFile) bool { return g.Path == f.Path }) {
			files = append(files, f)
		}
	}
	st.Files = files
	decisions := append([]string{}, facts.Decisions...)
	for _, d := range st.Decisions {
		if !slices.Contains(decisions, d) {
			decisions = append(decisions, d)
		}
	}
	st.Decisions = decisions
	if st.Guide != nil {
		st.Guide.Wants, st.Guide.Rejects = append(st.Guide.Wants, facts.Wants...), append(st.Guide.Rejects, facts.Rejects...)
	}
	return st
}

// userPrompts returns the text of the user's prompts (user messages with
// text and no tool result), in order.
func userPrompts(msgs []Message) []string {
	var out []string
	for i := range msgs {
		if msgs[i].Role != RoleUser || len(msgs[i].Results()) > 0 || isHandoffText(&msgs[i]) {
			continue
		}
		if t := strings.TrimSpace(textOf(&msgs[i])); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// isHandoffText reports whether m is the state a window opened with (a
// pinned user message, as Render writes it): the state before carries it
// over, not its lines.
func isHandoffText(m *Message) bool {
	return m.Pinned && m.Role == RoleUser && len(m.Blocks) == 1 && strings.HasPrefix(m.Blocks[0].Text, handoffHead)
}

// handoffHead starts the text of a rendered state.
const handoffHead = "[HANDOFF "

// textOf is a message's text blocks, joined by line breaks.
func textOf(m *Message) string {
	var parts []string
	for _, b := range m.Blocks {
		if t := b.Readable(); b.Type == BlockText && t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}

func headLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return clipText(strings.TrimSpace(s), handoffLineBytes)
}

// clipText cuts s to at most n bytes, on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// appendItem appends a line to a list unless it holds it, keeping the
// latest handoffItems.
func appendItem(list []string, l string) []string {
	if slices.Contains(list, l) {
		return list
	}
	list = append(list, l)
	if len(list) > handoffItems {
		list = list[len(list)-handoffItems:]
	}
	return list
}

// latestLines returns the lines of the text the agent wrote in msgs (not
// tools' input or output, nor the user's prompts: the task and the work in
// hand say those), trimmed of list marks, in order.
func latestLines(msgs []Message) []string {
	var out []string
	for i := range msgs {
		if msgs[i].Role != RoleAssistant {
			continue
		}
		for l := range strings.SplitSeq(textOf(&msgs[i]), "\n") {
			l = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "-*•>#0123456789.) \t"))
			if len(l) < 8 {
				continue
			}
			out = append(out, clipText(l, handoffLineBytes))
		}
	}
	return out
}

// The kinds of line classify tells apart.
type lineKind int

const (
	lineOther lineKind = iota
	lineDecision
	lineQuestion
	lineNext
	lineBlocker
	lineDone
)

// The words of each kind of line, matched as whole words at the start of
// a line (prefix) or anywhere in it (contains), lower-cased.
var (
	decisionWords = []string{"decided", "decision:", "we decided", "i decided", "chose ", "chosen", "going with", "settled on", "opted", "we'll use", "we will use", "i'll use", "i will use", "instead of"}
	nextStarts    = []string{"next", "todo", "to do", "then ", "remaining", "still to do", "plan:", "step "}
	nextWords     = []string{"next step", "still need", "need to", "i'll ", "i will ", "we'll ", "we will ", "will now", "left to do", "to do:"}
	blockerWords  = []string{"blocked", "blocker", "stuck", "waiting on", "waiting for", "cannot proceed", "can't proceed"}
	doneStarts    = []string{"done", "fixed", "implemented", "added", "completed", "finished", "wrote", "created", "updated", "removed"}
	doneWords     = []string{"tests pass", "all tests pass", "now passes", "is fixed", "is done", "works now"}
)

// classify says what kind of line l is, by its words, with no model: a
// question ends with "?"; a blocker, a decision, what is done and what is
// next have their words (first that matches, in that order).
func classify(l string) lineKind {
	s := strings.ToLower(l)
	has := func(words []string) bool {
		return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
	}
	starts := func(words []string) bool {
		return slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(s, w) })
	}
	switch {
	case strings.HasSuffix(s, "?") || strings.HasPrefix(s, "question:") || strings.HasPrefix(s, "open question"):
		return lineQuestion
	case has(blockerWords):
		return lineBlocker
	case has(decisionWords):
		return lineDecision
	case starts(doneStarts) || has(doneWords):
		return lineDone
	case starts(nextStarts) || has(nextWords):
		return lineNext
	}
	return lineOther
}

// writeTools are words of the names of tools that change the files they
// name.
var writeTools = []string{"write", "edit", "create", "patch", "replace", "apply", "insert", "delete", "remove", "move", "rename"}

// filesOf returns the paths msgs name: in tool calls' input, read, or
// modified when the tool writes (its name says so), and in tool results,
// mentioned; in order of first naming, at most handoffFiles, calls' first.
func filesOf(msgs []Message) []HandoffFile {
	var calls, mentioned []HandoffFile
	status := map[string]string{}
	for i := range msgs {
		for _, b := range msgs[i].Blocks {
			switch b.Type {
			case BlockToolUse:
				st := "read"
				name := strings.ToLower(b.Name)
				if slices.ContainsFunc(writeTools, func(w string) bool { return strings.Contains(name, w) }) {
					st = "modified"
				}
				for _, p := range pathsIn(string(b.Input)) {
					switch old, ok := status[p]; {
					case !ok || old == "mentioned":
						status[p] = st
						calls = append(calls, HandoffFile{Path: p, Status: st})
					case st == "modified" && old == "read":
						status[p] = st
						for j := range calls {
							if calls[j].Path == p {
								calls[j].Status = st
							}
						}
					}
				}
			case BlockToolResult:
				text := b.Readable()
				if len(text) > 64<<10 {
					text = text[:64<<10]
				}
				for _, p := range pathsIn(text) {
					if _, ok := status[p]; !ok {
						status[p] = "mentioned"
						mentioned = append(mentioned, HandoffFile{Path: p, Status: "mentioned"})
					}
				}
			}
		}
	}
	var out []HandoffFile
	out = append(out, calls...)
	for _, f := range mentioned {
		if status[f.Path] == "mentioned" {
			out = append(out, f)
		}
	}
	if out == nil {
		return []HandoffFile{}
	}
	return out[:min(len(out), handoffFiles)]
}

// pathsIn returns the file paths named in text, in order, each once: words
// of path characters holding a "/" and ending in an extension of one to
// eight letters or digits ("internal/auth/jwt.go", "./cmd/main.go:12"),
// without a URL's, a leading "./" or a trailing line number.
func pathsIn(text string) []string {
	var out []string
	for i := 0; i < len(text); {
		if !pathByte(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && pathByte(text[j]) {
			j++
		}
		w := text[i:j]
		i = j
		if j+2 < len(text) && text[j] == ':' && text[j+1] == '/' && text[j+2] == '/' {
			// A URL: skip it whole.
			for i < len(text) && text[i] > ' ' && text[i] != '"' {
				i++
			}
			continue
		}
		w = strings.TrimPrefix(strings.TrimRight(w, ".-"), "./")
		if p, ok := asPath(w); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-' || c == '@' || c == '+'
}

// asPath reports whether w is a file path, as pathsIn takes them.
func asPath(w string) (string, bool) {
	if !strings.Contains(w, "/") || strings.Contains(w, "//") || strings.HasSuffix(w, "/") || len(w) > 512 {
		return "", false
	}
	dot := strings.LastIndexByte(w, '.')
	slash := strings.LastIndexByte(w, '/')
	if dot < slash+2 || dot == len(w)-1 || len(w)-dot-1 > 8 {
		return "", false
	}
	for _, c := range []byte(w[dot+1:]) {
		if c == '_' || c == '.' || c == '/' || c == '-' || c == '@' || c == '+' {
			return "", false // a path byte, not a letter or digit
		}
	}
	// Not a version or a number ("1.2/3.4").
	if _, err := strconv.ParseFloat(w[slash+1:], 64); err == nil {
		return "", false
	}
	return w, true
}

// failingTests returns the tests the latest tool results report failing:
// Go's "--- FAIL: TestName" and pytest's "FAILED path::test".
func failingTests(msgs []Message) []string {
	out := []string{}
	for i := range msgs {
		for _, b := range msgs[i].Blocks {
			if b.Type != BlockToolResult {
				continue
			}
			for l := range strings.SplitSeq(b.Readable(), "\n") {
				l = strings.TrimSpace(l)
				var name string
				switch {
				case strings.HasPrefix(l, "--- FAIL: "):
					name, _, _ = strings.Cut(strings.TrimPrefix(l, "--- FAIL: "), " ")
				case strings.HasPrefix(l, "FAILED "):
					name, _, _ = strings.Cut(strings.TrimPrefix(l, "FAILED "), " ")
				}
				if name != "" {
					out = appendItem(out, name)
				}
			}
		}
	}
	return out
}

// topicsOf returns the names the messages mention most (see entitiesOf).
func topicsOf(msgs []Message) []string {
	counts := map[string]int{}
	for i := range msgs {
		for _, e := range entitiesOf(&msgs[i]) {
			counts[e]++
		}
	}
	return topEntities(counts, 8)
}

// Render writes the state as the text the next instance's window opens
// with: what to carry on with, and the markers of the prior window.
func (s HandoffState) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, handoffHead+"%d: %s takes over from %s (%s), %s, %s]\n", s.Index, s.ToAgent, s.FromAgent, s.Role, s.Reason,
		s.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "You continue the work of %s, whose context window was handed off to you. Its state:\n", s.FromAgent)
	if !slices.Contains(s.Sources, "archivalist") {
		b.WriteString("(The archivalist holds no state of this session: this was built from the prior window alone.)\n")
	}
	section := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(it, "\n", "\n  "))
		}
	}
	fmt.Fprintf(&b, "\nTask:\n%s\n", strings.TrimSpace(cmp.Or(s.Task, "(not known)")))
	if s.Objective != "" {
		fmt.Fprintf(&b, "\nObjective: %s\n", s.Objective)
	}
	section("Done", s.Progress.Done)
	if s.Progress.InProgress != "" {
		fmt.Fprintf(&b, "\nIn progress: %s\n", s.Progress.InProgress)
	}
	section("Next steps", s.Next)
	section("Blockers", s.Blockers)
	section("Decisions", s.Decisions)
	section("Open questions", s.Questions)
	var files []string
	for _, f := range s.Files {
		line := f.Path + " (" + f.Status + ")"
		if f.Summary != "" {
			line += ": " + f.Summary
		}
		files = append(files, line)
	}
	section("Files", files)
	if s.Tester != nil {
		section("Failing tests", s.Tester.FailingTests)
	}
	if s.Orchestrator != nil {
		var agents []string
		for _, a := range s.Orchestrator.Agents {
			line := fmt.Sprintf("%s (%s): %d of %d tokens", a.Agent, a.Role, a.Used, a.Budget)
			if a.HandoffDue {
				line += ", handoff due"
			}
			agents = append(agents, line)
		}
		section("Agents", agents)
	}
	if s.Guide != nil {
		section("The user wants", s.Guide.Wants)
		section("The user rejects", s.Guide.Rejects)
		if len(s.Guide.Topics) > 0 {
			fmt.Fprintf(&b, "\nTopics: %s\n", strings.Join(s.Guide.Topics, ", "))
		}
	}
	if s.Previous != "" {
		fmt.Fprintf(&b, "\nPrevious handoff state: entry %s\n", s.Previous)
	}
	fmt.Fprintf(&b, "\nThe prior window of %s, every message of it, is behind these markers (retrieve_context expands each):\n", s.FromAgent)
	for _, r := range s.Refs {
		b.WriteString(r.Marker + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// NextAgent names the agent a handoff of agent goes to: "engineer" hands
// off to "engineer-2", "engineer-2" to "engineer-3".
func NextAgent(agent string) string {
	if i := strings.LastIndexByte(agent, '-'); i > 0 {
		if n, err := strconv.Atoi(agent[i+1:]); err == nil && n >= 2 && strconv.Itoa(n) == agent[i+1:] {
			return agent[:i+1] + strconv.Itoa(n+1)
		}
	}
	return agent + "-2"
}

// checkAgent checks the agent of a new window (a handoff's next one
// among them) as the content store takes it.
func checkAgent(id string) error { return checkName("agent", id) }

// checkName checks the session or agent of a new window: 1 to
// store.MaxIdentifierBytes bytes of UTF-8, no white space at its ends, no
// control characters, none of the invisible characters that reorder or
// hide text (a right-to-left override or a soft hyphen makes one name read
// as another; the joiners of scripts and emoji are fine), and not "." or
// "..", which no URL path can name.
func checkName(field, id string) error {
	switch {
	case id == "" || len(id) > store.MaxIdentifierBytes:
		return fmt.Errorf("%w: %s %q: the ID takes 1 to %d bytes", ErrInvalid, field, id, store.MaxIdentifierBytes)
	case !utf8.ValidString(id) || strings.TrimSpace(id) != id || strings.ContainsFunc(id, func(r rune) bool { return unicode.IsControl(r) || misleads(r) }):
		return fmt.Errorf("%w: %s %q: the ID is UTF-8 without control characters, characters that reorder or hide text, or white space at its ends", ErrInvalid, field, id)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %s %q: the ID may not be . or .., which a URL cannot name", ErrInvalid, field, id)
	}
	return nil
}

// misleads reports the characters that make a name read as another: the
// invisible formatting characters (Unicode's Cf: bidirectional controls,
// zero-width space, soft hyphen, tags, ...), but for the joiners that
// scripts and emoji need (U+200C, U+200D).
func misleads(r rune) bool { return store.Misleads(r) }
