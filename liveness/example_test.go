package liveness_test

import (
	"fmt"

	"github.com/onnxmem/onnxmem/liveness"
)

// ExampleAnalyze is the worked example of the package comment: buffer 0 is
// live before the first event, buffer 3 is never freed and buffer 4 never
// touched.
func ExampleAnalyze() {
	size := []int64{8, 10, 20, 5, 7}
	events := []liveness.Event{
		{Buf: 1},
		{Buf: 2},
		{Buf: 1, Free: true},
		{Buf: 3},
		{Buf: 0, Free: true},
		{Buf: 2, Free: true},
	}
	a, err := liveness.Analyze(events, len(size), []int32{0}, func(b int32) int64 { return size[b] })
	if err != nil {
		fmt.Println(err)
		return
	}
	for b, iv := range a.Intervals {
		fmt.Printf("buffer %d (%2d bytes): %v\n", b, size[b], iv)
	}
	fmt.Println("base", a.Base, "curve", a.Curve)
	fmt.Println("peak", a.Peak, "at event", a.PeakAt, "live", a.LiveAt(a.PeakAt))
	// Output:
	// buffer 0 ( 8 bytes): [-1, 4)
	// buffer 1 (10 bytes): [0, 2)
	// buffer 2 (20 bytes): [1, 5)
	// buffer 3 ( 5 bytes): [3, 6)
	// buffer 4 ( 7 bytes): not live
	// base 8 curve [18 38 28 33 25 5]
	// peak 38 at event 1 live [2 1 0]
}

// ExampleAnalyze_reuse shows that a buffer ID names one allocation: a program
// that allocates a freed buffer again is broken.
func ExampleAnalyze_reuse() {
	events := []liveness.Event{{Buf: 0}, {Buf: 0, Free: true}, {Buf: 0}}
	_, err := liveness.Analyze(events, 1, nil, func(int32) int64 { return 4 })
	fmt.Println(err)
	// Output:
	// liveness: event 2 allocates buffer 0 again (allocated by event 0, freed by event 1): buffers are not reused
}
