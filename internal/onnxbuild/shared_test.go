package onnxbuild

import (
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// recorder is a testing.TB that records how Shared ends a test and stops
// the goroutine there, as the real Fatalf and Skipf do.
type recorder struct {
	testing.TB
	ended string
}

// Helper, Fatalf and Skipf replace the methods that Shared calls.
func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.ended = "fatal"; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)  { r.ended = "skip"; runtime.Goexit() }

// TestShared checks Shared on a missing folder: a skip, or a failure under
// CI=true; and on a present one: its path.
func TestShared(t *testing.T) {
	old := SharedDir
	defer func() { SharedDir = old }()
	SharedDir = t.TempDir()
	run := func(rel string) (path, ended string) {
		r := &recorder{TB: t}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			path = Shared(r, rel)
		}()
		wg.Wait()
		return path, r.ended
	}
	for _, c := range []struct{ ci, want string }{{"", "skip"}, {"false", "skip"}, {"true", "fatal"}} {
		t.Setenv("CI", c.ci)
		if _, ended := run("absent"); ended != c.want {
			t.Errorf("CI=%q, missing data: %s, want %s", c.ci, ended, c.want)
		}
	}
	if path, ended := run("."); ended != "" || path != filepath.Join(SharedDir, ".") {
		t.Errorf("present data: path %q, ended %q", path, ended)
	}
}
