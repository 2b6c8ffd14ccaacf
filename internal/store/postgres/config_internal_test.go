package postgres

import (
	"os"
	"path/filepath"
	"testing"
)

// The password comes from ENGRAM_STORE_PASSWORD, else the first line of
// the file ENGRAM_STORE_PASSWORD_FILE names, else what pgx finds itself
// (PGPASSWORD, ~/.pgpass).
func TestConfigPassword(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("from-the-file\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{PasswordEnv: "from-env", PasswordFileEnv: pw}, "from-env"},
		{map[string]string{PasswordFileEnv: pw}, "from-the-file"},
		{map[string]string{}, ""},
	} {
		cfg, err := config("postgres://engram@db.example:5432/engram", func(k string) string { return tc.env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.ConnConfig.Password; got != tc.want && (tc.want != "" || os.Getenv("PGPASSWORD") == "") {
			t.Errorf("env %v: password %q, want %q", tc.env, got, tc.want)
		}
	}
}
