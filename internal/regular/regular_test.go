package regular

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRefusesNonRegular checks that a named pipe and a directory are
// refused before they are opened (a pipe would block the open), naming
// the path and what it is, and that a regular file reads.
func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, what := range map[string]string{fifo: "a named pipe", dir: "a directory"} {
		if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), what) {
			t.Errorf("ReadFile(%s): %v, want an error naming it %s", path, err, what)
		}
		if f, err := Open(path); err == nil {
			f.Close()
			t.Errorf("Open(%s) opened it", path)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := OpenIn(root, "fifo"); err == nil || !strings.Contains(err.Error(), "a named pipe") {
		t.Errorf("OpenIn(fifo): %v, want a named pipe refused", err)
	}
	if b, err := ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("ReadFile(file) = %q, %v", b, err)
	}
	f, err := OpenIn(root, "file")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
