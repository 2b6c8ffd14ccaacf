package archive

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

// TestWritesRedactSecrets writes a GitHub token and an AWS key through
// every kind of archive write, agent registration included, and finds
// neither in anything the store holds or a read returns.
func TestWritesRedactSecrets(t *testing.T) {
	ctx := context.Background()
	gh := "ghp_" + strings.Repeat("k3Y9", 9)
	aws := "AKIA" + "Q7W3R5T8Y2U4I6OP"
	secret := func(s string) string { return s + " token " + gh + " key " + aws }
	a, st := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1", Model: secret("claude"), Name: secret("n"), Role: secret("r")})
	ok := ok(t)
	ok(h.RecordPattern(ctx, Pattern{Category: "auth.tokens", Pattern: secret("send the token"), Description: secret("d"), Example: secret("e")}))
	f := ok(h.RecordFailure(ctx, Failure{Category: "auth.tokens", Approach: secret("hard-coded"), Reason: secret("leaked"),
		Error: secret("401"), Resolution: &Resolution{Approach: secret("env var"), Outcome: Success, Notes: secret("n")}}))
	ok(h.RecordResolution(ctx, f.ID, Resolution{Approach: secret("vault"), Outcome: Partial}))
	ok(h.RecordInsight(ctx, Insight{Category: "auth.tokens", Insight: secret("tokens expire"), Evidence: secret("log")}))
	ok(h.RecordDecision(ctx, Decision{Category: "auth.tokens", Decision: secret("rotate weekly"), Rationale: secret("r"), Alternatives: []string{secret("never")}}))
	ok(h.DeclareIntent(ctx, Intent{Description: secret("rotate keys"), Paths: []string{"internal/auth"}}))
	ok(h.UpdateResume(ctx, Resume{Task: secret("auth"), Current: secret("c"), Next: []string{secret("n")}}))
	ok(h.UpdateFile(ctx, FileState{Path: "internal/auth/token.go", Status: Modified, Summary: secret("s")}))
	ok(h.AddPreference(ctx, Preference{Text: secret("keep the token")}))
	ok(h.AddPreference(ctx, Preference{Text: secret("no plain text"), Reject: true}))

	var held []string
	recs, err := st.ArchiveRecords(ctx, store.RecordQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		held = append(held, r.Text, r.Key, r.Model, string(r.Body))
	}
	agents, err := st.ArchiveAgents(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, ag := range agents {
		held = append(held, ag.Name, ag.Model, ag.Role)
	}
	evs, err := st.ArchiveEvents(ctx, -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		held = append(held, e.Detail)
	}
	for _, tier := range []Tier{Micro, Standard, Full} {
		b, err := a.Briefing(ctx, "s1", tier, nil)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(b)
		held = append(held, b.Text, string(js))
	}
	hits, err := st.ArchiveSearch(ctx, "token", nil, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) == 0 {
		t.Error("the redacted records are not found by their other words")
	}
	all := strings.Join(held, "\n")
	for _, s := range []string{gh, aws} {
		if strings.Contains(all, s) {
			t.Errorf("the store or a briefing holds %s", s[:4])
		}
	}
	if n := strings.Count(all, "[REDACTED:github_token]"); n < 20 {
		t.Errorf("%d redactions of the GitHub token, want one per field written", n)
	}
	for _, r := range recs {
		if !json.Valid(r.Body) {
			t.Errorf("record %s: body is not JSON after redaction: %s", r.ID, r.Body)
		}
	}
}

// TestKeepSecrets: with Options.KeepSecrets the archive stores what it is
// given, as the engine does with ingest.keep_secrets.
func TestKeepSecrets(t *testing.T) {
	ctx := context.Background()
	gh := "ghp_" + strings.Repeat("k3Y9", 9)
	a, st := newArchive(t, Options{KeepSecrets: true})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ok(t)(h.RecordInsight(ctx, Insight{Insight: "the token is " + gh}))
	recs, err := st.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !strings.Contains(string(recs[0].Body), gh) {
		t.Errorf("records %+v: want the insight as given", recs)
	}
}
