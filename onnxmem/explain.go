package onnxmem

import (
	"fmt"
	"io"

	"github.com/onnxmem/onnxmem/internal/pickle"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// Explanation is a peak's bytes alive by kind and by top-level layer (-1: none).
type Explanation struct {
	Result  *Result
	ByKind  []KindBytes
	ByLayer []LayerBytes
}

// LayerBytes is the bytes of a top-level layer's buffers.
type LayerBytes struct {
	Layer int
	Name  string
	Bytes int64
	Count int
}

// Explain simulates a step and explains its peak.
func (m *Model) Explain(sc Scenario) (*Explanation, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	ex, err := e.Explain(o)
	if err != nil {
		return nil, err
	}
	r := result(ex.Result, sc)
	out := &Explanation{Result: r, ByKind: r.PeakByKind[:0:0]}
	for _, k := range ex.ByKind {
		out.ByKind = append(out.ByKind, KindBytes(k))
	}
	for _, l := range ex.ByLayer {
		out.ByLayer = append(out.ByLayer, LayerBytes(l))
	}
	return out, nil
}

// Sample is a step's allocator counters and live bytes after an event.
type Sample struct {
	Event                                int
	Phase                                string
	Allocated, Requested, Reserved, Live int64
}

// Timeline simulates a step and returns its counters after every event.
func (m *Model) Timeline(sc Scenario) (*Result, []Sample, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, nil, err
	}
	r, ss, err := e.Timeline(o)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Sample, len(ss))
	for i, s := range ss {
		out[i] = Sample(s)
	}
	return result(r, sc), out, nil
}

// WriteSnapshot writes a step's allocator history as _dump_snapshot()
// does, each event with its node, for memory_viz (default allocator).
func (m *Model) WriteSnapshot(w io.Writer, sc Scenario) (*Result, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	s, err := e.Snapshot(o)
	if err != nil {
		return nil, err
	}
	return result(s.Result, sc), writePickle(w, s)
}

// writePickle writes s as torch.cuda.memory._dump_snapshot() does: the
// segments with their blocks, and the trace on device 0, stream 0, each
// event's frame naming its ONNX node.
func writePickle(w io.Writer, s *sim.Snapshot) error {
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
	snap := pickle.Dict{{Key: "segments", Value: segs}, {Key: "device_traces", Value: pickle.List{trace}}}
	if err := pickle.Write(w, snap); err != nil {
		return fmt.Errorf("onnxmem: snapshot: %w", err)
	}
	return nil
}
