package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNamedPipeRefused gives a named pipe wherever a command reads a file
// (the model, -data, -events, diff's snapshot, predict's model under
// -root): each must refuse it at once, naming it, where opening it would
// wait for a writer forever.
func TestNamedPipeRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"report", "-step", "model", fifo}},
		{"", []string{"maxbatch", "-data", fifo, "-device", "rtx4090", "yolov9-t"}},
		{"", []string{"run", "-events", fifo, "yolov9-t"}},
		{"", []string{"diff", fifo, "yolov9-t"}},
		{`{"kind":"model_step","model":"pipe","batch":1,"img":640}`, []string{"predict", "-root", dir}},
	} {
		done := make(chan struct{})
		var out, errOut string
		go func() {
			defer close(done)
			_, out, errOut = runCmd(t, tc.stdin, tc.args...)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("onnxmem %s: still waiting on the named pipe", strings.Join(tc.args, " "))
		}
		if msg := out + errOut; !strings.Contains(msg, "not a regular file (a named pipe)") {
			t.Errorf("onnxmem %s: %q, want the pipe refused by name", strings.Join(tc.args, " "), msg)
		}
	}
}
