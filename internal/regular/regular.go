// Package regular opens the files onnxmem reads only when they are regular
// files: a named pipe, a device or a directory given where a file belongs
// would block the read or never end it, so each is refused, naming the
// path, before it is opened.
//
// Worked example: `onnxmem run -events /tmp/fifo yolov9-s`, with /tmp/fifo
// made by mkfifo, fails at once with "/tmp/fifo is not a regular file (a
// named pipe)" where os.Open would wait for a writer forever.
package regular

import (
	"fmt"
	"io/fs"
	"os"
)

// Check returns an error when path, after symbolic links, is not a
// regular file; it passes os.Stat's own errors through as os.Open's.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return asOpen(err)
	}
	return checkMode(path, st.Mode())
}

// asOpen reports a failed stat as the open it stands before: "open
// x.onnx: no such file or directory", as os.Open would say.
func asOpen(err error) error {
	if pe, ok := err.(*fs.PathError); ok && pe.Op == "stat" {
		return &fs.PathError{Op: "open", Path: pe.Path, Err: pe.Err}
	}
	return err
}

// checkMode returns the error of Check for a file's mode.
func checkMode(path string, m fs.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	what := "not a file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		what = "a device"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	}
	return fmt.Errorf("%s is not a regular file (%s): give the path of a file", path, what)
}

// Open opens path for reading once Check has passed.
func Open(path string) (*os.File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.Open(path)
}

// ReadFile reads path once Check has passed.
func ReadFile(path string) ([]byte, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// OpenIn opens name in root for reading once it is known to be a regular
// file there.
func OpenIn(root *os.Root, name string) (*os.File, error) {
	st, err := root.Stat(name)
	if err != nil {
		return nil, asOpen(err)
	}
	if err := checkMode(name, st.Mode()); err != nil {
		return nil, err
	}
	return root.Open(name)
}
