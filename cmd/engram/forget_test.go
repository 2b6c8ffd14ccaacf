package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCLI_Forget(t *testing.T) {
	e := newEnv(t)
	e.vars["USER"] = "alice"
	ids := strings.Fields(e.ok(readExample(t), "add"))
	e.ok(`{"session":"other","agent":"b","role":"user","content":"an unrelated pelican question"}`+"\n", "add")
	if out := e.ok("", "search", "backoff", "jitter"); !strings.Contains(out, "demo-flaky-test") {
		t.Fatalf("before: %s", out)
	}

	// Without a terminal it needs --yes, and removes nothing until then.
	code, _, errOut := e.run("", "forget", "session", "demo-flaky-test")
	if code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("forget without --yes: exit %d\n%s", code, errOut)
	}
	out := e.ok("", "forget", "session", "demo-flaky-test", "--dry-run")
	if !strings.Contains(out, "would forget session:demo-flaky-test") || !strings.Contains(out, "occurrences") {
		t.Errorf("dry run:\n%s", out)
	}
	if out := e.ok("", "search", "backoff", "jitter"); !strings.Contains(out, "demo-flaky-test") {
		t.Errorf("a dry run or a refusal removed something:\n%s", out)
	}
	var plan purgeJSON
	if err := jsonUnmarshal(e.ok("", "forget", "session", "demo-flaky-test", "--dry-run", "--json"), &plan); err != nil || !plan.DryRun || plan.Counts.Occurrences != int64(len(ids)) {
		t.Errorf("dry run --json = %+v, %v", plan, err)
	}

	out = e.ok("", "forget", "session", "demo-flaky-test", "--yes")
	if !strings.Contains(out, "forgot session:demo-flaky-test") || !strings.Contains(out, "audit record 1") {
		t.Errorf("forget:\n%s", out)
	}
	if code, out, _ := e.run("", "search", "backoff", "jitter"); strings.Contains(out, "demo-flaky-test") {
		t.Errorf("search after forgetting (exit %d):\n%s", code, out)
	}
	if code, _, errOut := e.run("", "show", ids[0]); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("show a forgotten entry: exit %d %s", code, errOut)
	}

	// An entry by prefix; mistakes are errors that remove nothing.
	other := strings.Fields(e.ok(`{"session":"other","agent":"b","role":"assistant","content":"pelicans fish in groups"}`+"\n", "add"))[0]
	if code, _, errOut := e.run("", "forget", "entry", "zz", "--yes"); code != 1 || !strings.Contains(errOut, "prefix") {
		t.Errorf("a bad prefix: exit %d %s", code, errOut)
	}
	if code, _, errOut := e.run("", "forget", "record", "pat-404", "--yes"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("an unknown record: exit %d %s", code, errOut)
	}
	if code, _, _ := e.run("", "forget"); code != 2 {
		t.Errorf("forget with nothing named: exit %d, want 2", code)
	}
	if code, _, errOut := e.run("", "forget", "--retention", "--yes"); code != 1 || !strings.Contains(errOut, "no retention") {
		t.Errorf("retention unset: exit %d %s", code, errOut)
	}
	e.ok("", "forget", "entry", other[:10], "--yes", "--actor", "bob")
	if out := e.ok("", "search", "pelicans", "fish"); strings.Contains(out, other[:8]) {
		t.Errorf("the forgotten entry is still found:\n%s", out)
	}

	// The audit: who, what, how much.
	out = e.ok("", "audit")
	if !strings.Contains(out, "alice@") || !strings.Contains(out, "session:demo-flaky-test") || !strings.Contains(out, "bob forget entry:"+other) {
		t.Errorf("audit:\n%s", out)
	}
	var aud []struct {
		Actor, Action string
		Targets       []string
	}
	if err := jsonUnmarshal(e.ok("", "audit", "--json"), &aud); err != nil || len(aud) != 2 || aud[1].Actor != "bob" {
		t.Errorf("audit --json = %+v, %v", aud, err)
	}
}

// TestCLI_StatsAfterForget: once the only entry of a type is forgotten,
// engram stats no longer lists that type (as "note 0 0 tokens").
func TestCLI_StatsAfterForget(t *testing.T) {
	e := newEnv(t)
	ids := strings.Fields(e.ok(`{"session":"x","role":"user","content":"hello there"}
{"session":"x","type":"note","content":"a note to forget"}
`, "add", "--no-embed"))
	if len(ids) != 2 {
		t.Fatalf("add: %q", ids)
	}
	if out := e.ok("", "stats"); !strings.Contains(out, "note ") {
		t.Fatalf("stats before the forget lists no note:\n%s", out)
	}
	e.ok("", "forget", "entry", ids[1], "--yes")
	out := e.ok("", "stats")
	if strings.Contains(out, "note ") || !strings.Contains(out, "user_prompt ") {
		t.Errorf("stats after the note was forgotten:\n%s", out)
	}
}

func TestCLI_Redact(t *testing.T) {
	e := newEnv(t)
	const secret = "corp-db-pass:Wy7Tq2Zp!x"
	id := strings.Fields(e.ok(`{"session":"s1","agent":"a","type":"tool_result","content":"connecting with `+secret+` to the replica\nthen the query ran"}`+"\n", "add"))[0]

	// The string on standard input cannot also answer the question.
	if code, _, errOut := e.run(secret+"\n", "redact"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("redact from stdin without --yes: exit %d %s", code, errOut)
	}
	if code, _, errOut := e.run("abc\n", "redact", "--yes"); code != 1 || !strings.Contains(errOut, "at least 4") {
		t.Errorf("a short string: exit %d %s", code, errOut)
	}
	out := e.ok(secret+"\n", "redact", "--dry-run")
	if !strings.Contains(out, "would redact") || !strings.Contains(out, "places") || strings.Contains(out, secret) {
		t.Errorf("dry run:\n%s", out)
	}
	if out := e.ok("", "show", id); !strings.Contains(out, secret) {
		t.Errorf("a dry run changed the entry:\n%s", out)
	}
	code, out, errOut := e.run(secret+"\n", "redact", "--yes")
	if code != 0 || !strings.Contains(out, "redacted") || strings.Contains(out+errOut, secret) {
		t.Fatalf("redact: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = e.run("", "show", id)
	if code != 0 || strings.Contains(out, secret) || !strings.Contains(out, "connecting with [REDACTED] to the replica") || !strings.Contains(errOut, "was redacted") {
		t.Errorf("the entry after redaction (same ID): exit %d\n%s\n%s", code, out, errOut)
	}
	var shown entryJSON
	if err := jsonUnmarshal(e.ok("", "show", id, "--json"), &shown); err != nil || !shown.Redacted || shown.ID != id {
		t.Errorf("show --json = %+v, %v", shown, err)
	}
	if out := e.ok("", "search", "Wy7Tq2Zp"); strings.Contains(out, id[:8]) {
		t.Errorf("still found by the string's words:\n%s", out)
	}
	if out := e.ok("", "audit", "--json"); strings.Contains(out, "Wy7Tq2Zp") || !strings.Contains(out, `"action": "redact"`) {
		t.Errorf("audit:\n%s", out)
	}

	// From a file, and as an argument with a warning.
	e.ok(`{"session":"s2","agent":"a","role":"user","content":"the other one is hunter22hunter22"}`+"\n", "add")
	file := filepath.Join(t.TempDir(), "leak.txt")
	if err := os.WriteFile(file, []byte("hunter22hunter22\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rep purgeJSON
	if err := jsonUnmarshal(e.ok("", "redact", "--from-file", file, "--yes", "--json"), &rep); err != nil || rep.Counts.Entries != 1 || rep.Audit == 0 {
		t.Errorf("redact --from-file = %+v, %v", rep, err)
	}
	e.ok(`{"session":"s3","agent":"a","role":"user","content":"and sesame-open-42"}`+"\n", "add")
	code, _, errOut = e.run("", "redact", "sesame-open-42", "--yes")
	if code != 0 || !strings.Contains(errOut, "shell history") {
		t.Errorf("redact with an argument: exit %d %s", code, errOut)
	}
}

func TestCLI_Retention(t *testing.T) {
	e := newEnv(t)
	old := time.Now().Add(-100 * 24 * time.Hour).UTC().Format(time.RFC3339)
	e.ok(`{"session":"ancient","agent":"a","role":"user","content":"an old question about sundials","time":"`+old+`"}`+"\n", "add")
	e.ok(`{"session":"recent","agent":"a","role":"user","content":"a new question about clocks"}`+"\n", "add")
	if err := os.WriteFile(filepath.Join(e.project, ".engram.toml"), []byte("[retention]\nmax_age = \"30d\"\ndisk_cap = \"1KiB\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "forget", "--retention", "--dry-run")
	if !strings.Contains(out, "ancient") || strings.Contains(out, "recent") {
		t.Errorf("retention dry run:\n%s", out)
	}
	out = e.ok("", "forget", "--retention", "--yes")
	if !strings.Contains(out, "sessions: ancient") {
		t.Errorf("retention:\n%s", out)
	}
	if out := e.ok("", "search", "sundials"); strings.Contains(out, "ancient") {
		t.Errorf("the old session is still found:\n%s", out)
	}
	if out := e.ok("", "audit"); !strings.Contains(out, "retention session:ancient") {
		t.Errorf("audit:\n%s", out)
	}
	// The disk cap: stats warns and shows the share.
	code, out, errOut := e.run("", "stats")
	if code != 0 || !strings.Contains(errOut, "warning: the store is over its disk cap") || !strings.Contains(out, "cap (over)") {
		t.Errorf("stats over the cap: exit %d\n%s\n%s", code, out, errOut)
	}
	var st statsJSON
	if err := jsonUnmarshal(e.ok("", "stats", "--json"), &st); err != nil || st.Disk == nil || st.Disk.Level != "over" || st.Disk.CapBytes != 1024 {
		t.Errorf("stats --json disk = %+v, %v", st.Disk, err)
	}
}

// TestServe_Retention runs engram serve with a retention policy: it
// forgets the sessions past it by itself.
func TestServe_Retention(t *testing.T) {
	e := newEnv(t)
	old := time.Now().Add(-100 * 24 * time.Hour).UTC().Format(time.RFC3339)
	e.ok(`{"session":"ancient","agent":"a","role":"user","content":"an old question about sundials","time":"`+old+`"}`+"\n", "add")
	if err := os.WriteFile(filepath.Join(e.project, ".engram.toml"), []byte("[retention]\nmax_age = \"30d\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startServe(ctx, t, e, "--no-index")
	for {
		if out := e.ok("", "audit"); strings.Contains(out, "retention session:ancient") {
			if !strings.Contains(out, "engram serve (") {
				t.Errorf("the audit does not say engram serve did it:\n%s", out)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("engram serve did not apply the retention policy")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if out := e.ok("", "search", "sundials"); strings.Contains(out, "ancient") {
		t.Errorf("the old session is still found:\n%s", out)
	}
}

// TestCLI_RedactDropsModelOnce redacts a word the corpus model learned:
// engram redact says once, on standard output, that it dropped the model,
// and no log line repeats it on standard error at the default level.
func TestCLI_RedactDropsModelOnce(t *testing.T) {
	e := newEnv(t)
	// The sample session and a few notes: enough chunks (20) for engram
	// add to train the corpus model, whose vocabulary holds maxBackoff.
	in := readExample(t)
	for i := range 5 {
		in += fmt.Sprintf(`{"session":"s2","agent":"a","role":"user","content":"note %d about the download helper"}`+"\n", i)
	}
	e.ok(in, "add")
	code, out, errOut := e.run("maxBackoff\n", "redact", "--yes")
	if code != 0 || strings.Count(out, "dropped the corpus model") != 1 {
		t.Fatalf("redact: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(errOut, "corpus model") {
		t.Errorf("standard error repeats the report:\n%s", errOut)
	}
}
