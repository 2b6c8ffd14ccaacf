package hook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"unicode"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/store"
)

// importTranscript reads a transcript from where the last import of it
// stopped. A missing transcript is a note, not an error: the hook has
// stored what it saw.
func (r *Runner) importTranscript(ctx context.Context, path string, res *Result) {
	if path == "" {
		res.Notes = append(res.Notes, "no transcript_path: nothing imported")
		return
	}
	if _, err := os.Stat(path); err != nil {
		res.Notes = append(res.Notes, "transcript: "+err.Error())
		return
	}
	im := Importer{Eng: r.Eng, Harness: r.Harness}
	rep, err := im.File(ctx, path)
	res.Stored += rep.Stored
	if err != nil {
		res.Notes = append(res.Notes, "transcript import: "+err.Error())
	}
	for _, p := range rep.Problems {
		res.Notes = append(res.Notes, "transcript import: "+p.String())
	}
}

func (r *Runner) preCompact(ctx context.Context, p Payload) (Result, error) {
	var res Result
	r.importTranscript(ctx, p.TranscriptPath, &res)
	ref, ok, err := r.compactionRef(ctx, p)
	if err != nil || !ok {
		return res, err
	}
	res.Refs = append(res.Refs, ref.ID)
	return res, nil
}

// compactionRef records one reference for the session's turns since its
// last compaction, and adds it to the session's list for SessionStart.
func (r *Runner) compactionRef(ctx context.Context, p Payload) (store.Reference, bool, error) {
	st, err := r.compactionState(ctx, p.SessionID)
	if err != nil {
		return store.Reference{}, false, err
	}
	ents, err := r.Eng.Store().TurnRange(ctx, p.SessionID, st.Turn+1, 0)
	if err != nil {
		return store.Reference{}, false, err
	}
	var ids, files, hints []string
	seen := map[string]bool{}
	from, to, tokens := 0, 0, 0
	for _, e := range ents {
		if e.Turn > 0 && (from == 0 || e.Turn < from) {
			from = e.Turn
		}
		to = max(to, e.Turn)
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		ids = append(ids, e.ID)
		tokens += e.TokenCount
		for _, f := range e.Files {
			if !containsString(files, f) {
				files = append(files, f)
			}
		}
		if e.Type == store.UserPrompt && len(hints) < 2 {
			hints = append(hints, firstLine(string(e.Content), 64))
		}
	}
	if len(ids) == 0 {
		return store.Reference{}, false, nil
	}
	sum := sha256.Sum256([]byte(p.SessionID + "\x00" + strings.Join(ids, ",")))
	ref := store.Reference{ID: "cmp-" + hex.EncodeToString(sum[:12]), Type: store.RefConversation, SessionID: p.SessionID,
		AgentID: r.agentOf(p.SessionID, p.AgentID, p.AgentType).id, ContentIDs: ids, TokensSaved: tokens,
		TurnFrom: from, TurnTo: to, CreatedAt: r.now(), Entities: files, QueryHints: hints}
	if err := r.Eng.Store().PutReference(ctx, ref); err != nil {
		return store.Reference{}, false, err
	}
	if !containsString(st.Refs, ref.ID) {
		st.Refs = append(st.Refs, ref.ID)
	}
	st.Turn = max(st.Turn, to)
	b, _ := json.Marshal(st)
	if err := r.Eng.Store().PutSetting(ctx, compactionKey(p.SessionID), string(b)); err != nil {
		return store.Reference{}, false, err
	}
	return ref, true, nil
}

func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	// Control characters (a NUL pasted into a prompt) are not a resume
	// point's text: the archive refuses them, and every Stop after
	// would fail.
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s))
	if len(s) > n {
		s = cutUTF8(s, n-3) + "…"
	}
	return s
}

// stop imports the rest of the transcript and updates the session's
// resume point from what the session holds: its first request, its
// latest, the assistant's last answer and the files it touched.
func (r *Runner) stop(ctx context.Context, p Payload) (Result, error) {
	var res Result
	r.importTranscript(ctx, p.TranscriptPath, &res)
	if p.AgentTranscriptPath != "" {
		r.importTranscript(ctx, p.AgentTranscriptPath, &res)
	}
	if p.AgentID != "" || p.Event != Stop {
		return res, nil // a sub-agent's stop, or the session's end: nothing slow
	}
	resume, err := r.resume(ctx, p)
	if err != nil || resume == nil {
		return res, err
	}
	h, err := r.handle(ctx, p)
	if err != nil {
		return res, err
	}
	if _, err := h.UpdateResume(ctx, *resume); err != nil {
		return res, err
	}
	return res, nil
}

// recentTurns is how far back a resume point looks for the files touched.
const recentTurns = 5

func (r *Runner) resume(ctx context.Context, p Payload) (*archive.Resume, error) {
	first, err := r.Eng.Store().TurnRange(ctx, p.SessionID, 1, 1)
	if err != nil {
		return nil, err
	}
	last, err := r.Eng.Store().LastTurn(ctx, p.SessionID)
	if err != nil || last == 0 {
		return nil, err
	}
	recent, err := r.Eng.Store().TurnRange(ctx, p.SessionID, max(last-recentTurns+1, 1), last)
	if err != nil {
		return nil, err
	}
	var res archive.Resume
	for _, e := range first {
		if e.Type == store.UserPrompt {
			res.Task = firstLine(string(e.Content), 300)
			break
		}
	}
	var current string
	for _, e := range recent {
		if e.Type == store.UserPrompt {
			current = firstLine(string(e.Content), 300)
		}
		for _, f := range e.Files {
			// A path the archive would refuse (blank, a control
			// character, over its bound) is left out, not the point.
			if strings.TrimSpace(f) == "" || strings.ContainsFunc(f, unicode.IsControl) || len(f) > archive.MaxTextBytes {
				continue
			}
			if !containsString(res.FilesToRead, f) && len(res.FilesToRead) < 10 {
				res.FilesToRead = append(res.FilesToRead, f)
			}
		}
	}
	if current != "" && current != res.Task {
		res.Current = "asked: " + current
	}
	if a := firstLine(p.LastAssistantMessage, 400); a != "" {
		if res.Current != "" {
			res.Current += "; "
		}
		res.Current += "answered: " + a
	}
	if res.Task == "" && res.Current == "" {
		return nil, nil
	}
	return &res, nil
}
