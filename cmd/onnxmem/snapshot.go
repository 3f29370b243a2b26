package main

import (
	"os"

	"github.com/onnxmem/onnxmem/internal/pickle"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// writeSnapshot writes s as torch.cuda.memory._dump_snapshot() writes a
// snapshot: a pickle of {"segments": [...], "device_traces": [[...]]}, the
// segments with their blocks (state "active_allocated" or "inactive") and
// the trace's events (alloc, free_requested and free_completed, segment_alloc,
// segment_free, oom) on device 0, stream 0, each with a frame that names
// the ONNX node, so that PyTorch's memory_viz and
// python -m torch.cuda._memory_viz open it.
func writeSnapshot(path string, s *sim.Snapshot) error {
	var segs pickle.List
	for _, seg := range s.Segments {
		var blocks pickle.List
		var alloc, req int64
		for _, b := range seg.Blocks {
			state := "inactive"
			if b.Allocated {
				state = "active_allocated"
				alloc += b.Size
				req += b.Requested
			}
			blocks = append(blocks, pickle.Dict{{Key: "address", Value: b.Addr}, {Key: "size", Value: b.Size},
				{Key: "requested_size", Value: b.Requested}, {Key: "state", Value: state}, {Key: "frames", Value: pickle.List{}}})
		}
		kind := "large"
		if seg.Small {
			kind = "small"
		}
		segs = append(segs, pickle.Dict{{Key: "device", Value: 0}, {Key: "address", Value: seg.Addr}, {Key: "total_size", Value: seg.Size},
			{Key: "allocated_size", Value: alloc}, {Key: "active_size", Value: alloc}, {Key: "requested_size", Value: req},
			{Key: "stream", Value: 0}, {Key: "segment_type", Value: kind}, {Key: "segment_pool_id", Value: pickle.Tuple{0, 0}},
			{Key: "is_expandable", Value: false}, {Key: "frames", Value: pickle.List{}}, {Key: "blocks", Value: blocks}})
	}
	var trace pickle.List
	for i, e := range s.Events {
		frames := pickle.List{}
		if e.Node != "" {
			frames = pickle.List{pickle.Dict{{Key: "filename", Value: e.Node}, {Key: "line", Value: 0}, {Key: "name", Value: e.Op + " (" + e.Phase + ")"}}}
		} else if e.Phase != "" {
			frames = pickle.List{pickle.Dict{{Key: "filename", Value: "onnxmem step"}, {Key: "line", Value: 0}, {Key: "name", Value: e.Phase}}}
		}
		add := func(action string) {
			trace = append(trace, pickle.Dict{{Key: "action", Value: action}, {Key: "addr", Value: e.Addr}, {Key: "size", Value: e.Size},
				{Key: "stream", Value: 0}, {Key: "time_us", Value: i}, {Key: "frames", Value: frames}})
		}
		if e.Action == "free_completed" {
			add("free_requested")
		}
		add(e.Action)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	snap := pickle.Dict{{Key: "segments", Value: segs}, {Key: "device_traces", Value: pickle.List{trace}}}
	if err := pickle.Write(f, snap); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
