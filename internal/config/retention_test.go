package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad_Retention(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	file := filepath.Join(proj, ProjectFile)
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HOME": home}
	c, err := Load(proj, envOf(env), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention.On() || c.Retention.DiskCap.Bytes != 0 || c.Retention.Every() != time.Hour {
		t.Errorf("default retention = %+v: off, no cap, hourly", c.Retention)
	}

	write("[retention]\nmax_age = \"90d\"\nmax_bytes = \"10GiB\"\ndisk_cap = 5000000000\ninterval = \"15m\"\n")
	c, err = Load(proj, envOf(env), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Retention
	if r.MaxAge.Duration != 90*24*time.Hour || r.MaxBytes.Bytes != 10<<30 || r.DiskCap.Bytes != 5e9 || r.Every() != 15*time.Minute || !r.On() {
		t.Errorf("retention = %+v", r)
	}
	env["ENGRAM_RETENTION_MAX_AGE"] = "2w"
	env["ENGRAM_RETENTION_DISK_CAP"] = "1.5 GB"
	c, err = Load(proj, envOf(env), Flags{})
	if err != nil || c.Retention.MaxAge.Duration != 14*24*time.Hour || c.Retention.DiskCap.Bytes != 1.5e9 {
		t.Errorf("environment over the file: %+v, %v", c.Retention, err)
	}

	for _, tc := range []struct{ toml, want string }{
		{"[retention]\nmax_agee = \"1d\"\n", "unknown keys: retention.max_agee"},
		{"[retention]\nmax_age = \"ninety days\"\n", "not an age"},
		{"[retention]\nmax_age = \"-3d\"\n", "not an age"},
		{"[retention]\nmax_age = 30\n", "not an age"},
		{"[retention]\nmax_bytes = \"10 parsecs\"\n", "not a size"},
		{"[retention]\ndisk_cap = -5\n", "not a size"},
		{"[retention]\ninterval = \"10s\"\n", "retention.interval"},
	} {
		write(tc.toml)
		delete(env, "ENGRAM_RETENTION_MAX_AGE")
		delete(env, "ENGRAM_RETENTION_DISK_CAP")
		if _, err := Load(proj, envOf(env), Flags{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.toml, err, tc.want)
		}
	}
	write("")
	env["ENGRAM_RETENTION_MAX_BYTES"] = "lots"
	if _, err := Load(proj, envOf(env), Flags{}); err == nil || !strings.Contains(err.Error(), "ENGRAM_RETENTION_MAX_BYTES") {
		t.Errorf("bad variable: %v", err)
	}
}

func TestParseSizeAge(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "512": 512, "1K": 1024, "1KB": 1000, "2 MiB": 2 << 20, "1.5g": 3 << 29, "3TB": 3e12} {
		if got, err := ParseSize(s); err != nil || got.Bytes != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got.Bytes, err, want)
		}
	}
	for _, s := range []string{"", "GB", "1XB", "-1", "1e30"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) accepted", s)
		}
	}
	for s, want := range map[string]time.Duration{"0": 0, "": 0, "90d": 90 * 24 * time.Hour, "1.5w": 252 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := ParseAge(s); err != nil || got.Duration != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"d", "3x", "-1h", "1e300d"} {
		if _, err := ParseAge(s); err == nil {
			t.Errorf("ParseAge(%q) accepted", s)
		}
	}
	if s := (Size{10 << 30}).String(); s != "10GiB" {
		t.Errorf("Size.String = %s", s)
	}
}

func TestLoad_RetentionZero(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, ProjectFile), []byte("[retention]\nmax_age = 0\nmax_bytes = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(proj, envOf(map[string]string{"HOME": home}), Flags{})
	if err != nil || c.Retention.On() {
		t.Errorf("zeros: %+v, %v; want off", c.Retention, err)
	}
}
