package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
)

// TestCLI_StoreOnPostgres: a project starts on SQLite, is copied into
// PostgreSQL with engram store copy, is used there through --store, and
// is copied back into a new SQLite file; every step reads the same.
func TestCLI_StoreOnPostgres(t *testing.T) {
	url := pgtest.Database(t)
	e := newEnv(t)
	e.ok(readExample(t), "add")
	e.ok("", "pattern", "add", "Retry the connection with exponential backoff and jitter", "--category", "error.handling")
	before := e.ok("", "search", "backoff", "jitter")
	file := strings.TrimSpace(e.ok("", "stats", "--json"))
	var st statsJSON
	if err := jsonUnmarshal(file, &st); err != nil {
		t.Fatal(err)
	}

	// The migration is checked, then done, then found done. Another
	// command does not migrate a team's database (a newer engram's
	// would change it under every older one): it says to.
	if code, out, _ := e.run("", "migrate", "--check", "--store", url); code != 1 || !strings.Contains(out, "schema version 0") {
		t.Errorf("migrate --check of a new database: exit %d, %q", code, out)
	}
	if code, _, errOut := e.run("", "stats", "--store", url); code != 1 || !strings.Contains(errOut, "run engram migrate") {
		t.Errorf("stats of a database not migrated: exit %d, %q", code, errOut)
	}
	if _, out, _ := e.run("", "migrate", "--check", "--store", url); !strings.Contains(out, "schema version 0") {
		t.Errorf("stats migrated the database: %q", out)
	}
	e.fail("", 1, "password", "migrate", "--check", "--store", url+"&sslpassword=LEAKME")
	if _, _, errOut := e.run("", "migrate", "--check", "--store", url+"&sslpassword=LEAKME"); strings.Contains(errOut, "LEAKME") {
		t.Errorf("an sslpassword in the URL is printed: %q", errOut)
	}
	e.ok("", "migrate", "--store", url)
	if out := e.ok("", "migrate", "--check", "--store", url); !strings.Contains(out, fmt.Sprintf("schema version %d,", postgres.SchemaVersion())) {
		t.Errorf("migrate --check after migrate: %q", out)
	}

	out := e.ok("", "store", "copy", st.Store, url)
	if !strings.Contains(out, "verified") {
		t.Errorf("store copy said %q", out)
	}
	if got := e.ok("", "search", "--store", url, "backoff", "jitter"); got != before {
		t.Errorf("search on the copy:\n%s\nwant, as on the original:\n%s", got, before)
	}
	if out := e.ok("", "stats", "--check", "--store", url); !strings.HasSuffix(strings.TrimSpace(out), ": ok") {
		t.Errorf("stats --check of the copy: %q", out)
	}
	// The copy goes on as a store: an entry added there is found there.
	e.ok(`{"session":"s9","agent":"claude","role":"user","content":"The flaky retry test needs a fake clock"}`+"\n", "add", "--store", url)
	if out := e.ok("", "search", "--store", url, "fake", "clock"); !strings.Contains(out, "fake clock") {
		t.Errorf("search for what was added to the copy: %q", out)
	}

	// A copy into a store that holds one is refused.
	if code, _, errOut := e.run("", "store", "copy", st.Store, url); code == 0 || !strings.Contains(errOut, "already holds a store") {
		t.Errorf("a copy over a store: exit %d, %q", code, errOut)
	}
	// And back, into a new file.
	back := filepath.Join(t.TempDir(), "back.db")
	e.ok("", "store", "copy", url, back)
	if out := e.ok("", "search", "--store", back, "fake", "clock"); !strings.Contains(out, "fake clock") {
		t.Errorf("search on the copy back: %q", out)
	}
	if out := e.ok("", "stats", "--check", "--store", back); !strings.HasSuffix(strings.TrimSpace(out), ": ok") {
		t.Errorf("stats --check of the copy back: %q", out)
	}

	// A URL with a password is refused before anything is reached.
	if code, _, errOut := e.run("", "stats", "--store", "postgres://engram:secret@127.0.0.1:1/x"); code == 0 || !strings.Contains(errOut, "carries a password") {
		t.Errorf("a password in the URL: exit %d, %q", code, errOut)
	}
}

// TestCLI_StoreConnectionString: a store given in libpq's keyword/value
// form is the PostgreSQL database it names, not an SQLite file named so;
// with a password in it, it is refused, and no message shows the
// password.
func TestCLI_StoreConnectionString(t *testing.T) {
	u, err := url.Parse(pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=%s port=%s user=%s dbname=%s", u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"))
	if mode := u.Query().Get("sslmode"); mode != "" {
		kv += " sslmode=" + mode
	}
	e := newEnv(t)
	for _, args := range [][]string{{"stats"}, {"migrate", "--check"}, {"search", "x"}} {
		code, out, errOut := e.run("", append(args, "--store", kv+" password=LEAKME")...)
		if code == 0 || !strings.Contains(errOut, "carries a password") || strings.Contains(out+errOut, "LEAKME") {
			t.Errorf("engram %s with a password in the connection string: exit %d\n%s%s", args[0], code, out, errOut)
		}
	}
	e.ok("", "migrate", "--store", kv)
	e.ok(`{"session":"s1","agent":"claude","role":"user","content":"The flaky retry test needs a fake clock"}`+"\n", "add", "--store", kv)
	if out := e.ok("", "search", "--store", kv, "fake", "clock"); !strings.Contains(out, "fake clock") {
		t.Errorf("search through the connection string: %q", out)
	}
	if out := e.ok("", "search", "--store", u.String(), "fake", "clock"); !strings.Contains(out, "fake clock") {
		t.Errorf("search through the URL of the same database: %q", out)
	}
}
