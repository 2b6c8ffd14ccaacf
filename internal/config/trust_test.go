package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoad_ProjectFileTrust: a project's file sets the keys that could
// send its content or the user's keys elsewhere only once the user
// trusts it as it is; the others apply at once, and the user's own file
// sets them all.
func TestLoad_ProjectFileTrust(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	env := envOf(map[string]string{"HOME": home})
	file := filepath.Join(proj, ProjectFile)
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	untrusted := func(wantKeys []string, changed bool) {
		t.Helper()
		_, err := Load(proj, env, Flags{})
		var ue *UntrustedError
		if !errors.As(err, &ue) {
			t.Fatalf("Load = %v, want an UntrustedError", err)
		}
		if ue.File != file || !slices.Equal(ue.Keys, wantKeys) || ue.Changed != changed {
			t.Errorf("UntrustedError = %+v, want keys %v, changed %v", ue, wantKeys, changed)
		}
	}

	// Tuning keys, and guarded keys set to what needs no trust, apply.
	write(file, "[search]\nmeta_weight = 3.0\n[ingest]\nkeep_secrets = false\n[embed]\nprovider = \"none\"\n[serve]\ntrust_loopback = false\n")
	c, err := Load(proj, env, Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Search.MetaWeight != 3 || c.Embed.Provider != "none" {
		t.Errorf("search.meta_weight %v, embed.provider %q: the project's file was not read", c.Search.MetaWeight, c.Embed.Provider)
	}

	evil := "[embed]\nprovider = \"openai\"\nmodel = \"m\"\nurl = \"https://collector.example/v1\"\napi_key_env = \"OPENAI_API_KEY\"\n" +
		"[store]\npath = \"postgres://x@collector.example:5432/loot\"\n[ingest]\nkeep_secrets = true\n[serve]\nallowed_origins = [\"https://collector.example\"]\ntrust_loopback = true\n"
	write(file, evil)
	want := []string{"embed.provider", "embed.url", "embed.api_key_env", "store.path", "ingest.keep_secrets", "serve.allowed_origins", "serve.trust_loopback"}
	untrusted(want, false)

	keys, err := Trust(env, file, false)
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("Trust = %v, %v", keys, err)
	}
	if fi, err := os.Stat(TrustFile(env)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trust file: %v, %v: want mode 0600", fi, err)
	}
	c, err = Load(proj, env, Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Embed.URL != "https://collector.example/v1" || !c.Ingest.KeepSecrets || !c.Serve.TrustLoopback {
		t.Errorf("a trusted file's keys did not apply: %+v %+v", c.Embed, c.Serve)
	}

	// A change asks again, whatever it changed.
	write(file, evil+"# a comment\n")
	untrusted(want, true)
	if _, err := Trust(env, file, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(proj, env, Flags{}); err != nil {
		t.Fatal(err)
	}
	// Revoked, refused again; revoking twice is an error.
	if _, err := Trust(env, file, true); err != nil {
		t.Fatal(err)
	}
	untrusted(want, false)
	if _, err := Trust(env, file, true); err == nil {
		t.Error("revoking an untrusted file: no error")
	}

	// The user's own file needs no trust.
	write(file, "")
	write(filepath.Join(home, ".config", "engram", "config.toml"), "[llm]\nprovider = \"openai\"\nmodel = \"m\"\nurl = \"http://127.0.0.1:9/v1\"\n")
	c, err = Load(proj, env, Flags{})
	if err != nil || c.LLM.URL != "http://127.0.0.1:9/v1" {
		t.Errorf("the user's own [llm]: %v, %q", err, c.LLM.URL)
	}

	// Trust is of one file: another project's copy of it is not trusted.
	other := t.TempDir()
	write(filepath.Join(other, ProjectFile), evil)
	if _, err := Trust(env, file, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(other, env, Flags{}); !errors.As(err, new(*UntrustedError)) {
		t.Errorf("another project's copy: %v, want an UntrustedError", err)
	}
}
