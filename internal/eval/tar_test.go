package eval

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarEntry is one entry of a test archive: a file, or with link set a
// symbolic link, or with a name ending in / a directory.
type tarEntry struct {
	name, body, link string
}

func writeTarGz(t *testing.T, entries []tarEntry) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "a.tar.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExtractTarGz(t *testing.T) {
	archive := writeTarGz(t, []tarEntry{
		{name: "repo/"},
		{name: "repo/src/main.rs", body: "fn main() {}\n"},
		{name: "./repo/README.md", body: "# repo\n"},
		{name: "repo/link", link: "/etc"},
		{name: "repo/src/../lib.rs", body: "pub fn f() {}\n"}, // stays inside: repo/lib.rs
	})
	dir := t.TempDir()
	if err := ExtractTarGz(archive, dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"repo/src/main.rs": "fn main() {}\n", "repo/README.md": "# repo\n", "repo/lib.rs": "pub fn f() {}\n"} {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", p, got, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "repo/link")); !os.IsNotExist(err) {
		t.Errorf("a symbolic link was extracted: %v", err)
	}
}

func TestExtractTarGz_Traversal(t *testing.T) {
	for _, name := range []string{"../evil.txt", "repo/../../evil.txt", "/tmp/evil.txt", `..\evil.txt`} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "into")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			archive := writeTarGz(t, []tarEntry{{name: "repo/ok.txt", body: "ok"}, {name: name, body: "evil"}})
			err := ExtractTarGz(archive, dir)
			if err == nil || !strings.Contains(err.Error(), archive) || !strings.Contains(err.Error(), "entry") {
				t.Fatalf("ExtractTarGz with %q: %v; want an error naming the archive and entry", name, err)
			}
			if _, err := os.Stat(filepath.Join(parent, "evil.txt")); !os.IsNotExist(err) {
				t.Errorf("wrote outside the directory: %v", err)
			}
		})
	}
}

func TestExtractTarGz_Bad(t *testing.T) {
	notGzip := filepath.Join(t.TempDir(), "x.tar.gz")
	if err := os.WriteFile(notGzip, []byte("not an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ExtractTarGz(notGzip, t.TempDir()); err == nil || !strings.Contains(err.Error(), notGzip) {
		t.Errorf("not gzip: %v", err)
	}
	if err := ExtractTarGz(filepath.Join(t.TempDir(), "missing.tar.gz"), t.TempDir()); !os.IsNotExist(err) {
		t.Errorf("missing archive: %v", err)
	}
	// A file named twice is not overwritten.
	twice := writeTarGz(t, []tarEntry{{name: "a.txt", body: "1"}, {name: "a.txt", body: "2"}})
	if err := ExtractTarGz(twice, t.TempDir()); err == nil {
		t.Error("a file named twice: no error")
	}
}
