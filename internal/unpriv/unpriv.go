// Package unpriv lets a test about permissions run where they hold: as
// root, for whom no permission bit does, it runs the test again as the
// unprivileged user nobody.
package unpriv

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Rerun reports whether the calling test should go on: it is not run as
// root, or it is the run as nobody. Run as root, it runs the test (its
// top-level name) again as nobody, fails t if that run does not pass,
// and reports false.
func Rerun(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv("ENGRAM_TEST_UNPRIVILEGED") == "1" {
		return true
	}
	// The test binary sits in a directory only root may enter: a copy
	// goes where nobody can run it.
	dir, err := os.MkdirTemp("", "engram-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	name := strings.Split(t.Name(), "/")[0]
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{"ENGRAM_TEST_UNPRIVILEGED=1", "PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("as nobody, the test did not pass:\n%s", out)
	}
	t.Logf("as nobody:\n%s", out)
	return false
}
