package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestSnapshot checks a step's recorded history against its Result: the
// requested bytes that its events add up to reach the requested peak; the
// segments at its end hold the reserved bytes; every alloc inside an op
// names its node.
func TestSnapshot(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []sim.Options{
		{Batch: 2, Height: 320, Width: 320},
		{Batch: 4, Height: 320, Width: 320, AMP: true, Segments: 2},
		{Batch: 2, Height: 320, Width: 320, AMP: true, Train: true, Boxes: 4, EMA: true},
	} {
		s, err := m.Snapshot(sc)
		if err != nil {
			t.Fatal(err)
		}
		var cur, peak int64
		named := 0
		for _, e := range s.Events {
			switch e.Action {
			case "alloc":
				cur += e.Size
				if e.Node != "" {
					named++
				}
			case "free_completed":
				cur -= e.Size
			}
			peak = max(peak, cur)
		}
		// The events start with the measured step: the requested bytes
		// before it are m0's requests, which the segments' blocks hold.
		var before int64
		for _, seg := range s.Segments {
			for _, b := range seg.Blocks {
				before += b.Requested
			}
		}
		before -= cur // what is allocated at the end less what the events added
		if peak+before != s.Result.PeakRequested {
			t.Errorf("%+v: the events peak at %d requested above %d, the Result at %d", sc, peak, before, s.Result.PeakRequested)
		}
		var reserved int64
		for _, seg := range s.Segments {
			reserved += seg.Size
			var sum int64
			for _, b := range seg.Blocks {
				sum += b.Size
			}
			if sum != seg.Size {
				t.Errorf("%+v: a segment of %d bytes has blocks of %d", sc, seg.Size, sum)
			}
		}
		if reserved != s.Result.ReservedAfter {
			t.Errorf("%+v: segments hold %d reserved, the step ends with %d", sc, reserved, s.Result.ReservedAfter)
		}
		if named == 0 {
			t.Errorf("%+v: no alloc names its node", sc)
		}
	}
	if _, err := m.Snapshot(sim.Options{Batch: 1, Height: 64, Width: 64, AllocConf: "expandable_segments:True"}); err == nil {
		t.Error("a snapshot under allocator options was made")
	}
}
