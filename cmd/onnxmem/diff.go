package main

import (
	"bytes"
	"fmt"
	"github.com/onnxmem/onnxmem/internal/regular"
	"io"

	"github.com/onnxmem/onnxmem/internal/pickle"
)

func cmdDiff(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("diff",
		"onnxmem diff [-batch N] [-img N] [-amp|-half] [-segments K] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] SNAPSHOT.pickle MODEL.onnx",
		"Diff compares a memory snapshot taken on the GPU (torch.cuda.memory._dump_snapshot()\n"+
			"after _record_memory_history was enabled just before the measured step) with the\n"+
			"simulated step, allocation by allocation: the sizes of every alloc and free in\n"+
			"order, where the two first part (with the ONNX node the simulation was running\n"+
			"there), and the requested peak each gives above where it started (a trace's\n"+
			"sizes are the requests).",
		"onnxmem diff -batch 8 -amp step.pickle yolov9-s")
	batch := f.positive("batch", 8, "batch `size`")
	img, set := f.imgFlag(), f.stepFlags()
	f.familyFlag()
	pos, code, ok := f.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return f.usageError(stderr, "want a snapshot and a model, got %d arguments", len(pos))
	}
	st, err := set()
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	file, err := regular.Open(pos[0])
	if err != nil {
		return fail(stderr, fmt.Errorf("onnxmem: snapshot: %w", err))
	}
	real, err := readSnapshotTrace(file, pos[0])
	file.Close()
	if err != nil {
		return fail(stderr, err)
	}
	m, err := f.load(pos[1])
	if err != nil {
		return fail(stderr, err)
	}
	var snap bytes.Buffer
	if _, err := m.WriteSnapshot(&snap, st.scenario(*batch, *img)); err != nil {
		return fail(stderr, err)
	}
	simulated, err := readSnapshotTrace(&snap, "simulated")
	if err != nil {
		return fail(stderr, err)
	}
	return exit(stderr, printDiff(stdout, m.Name, pos[0], real, simulated))
}

// traceEvent is one alloc or free of a trace, with where it happened.
type traceEvent struct {
	alloc bool
	size  int64
	where string
}

func (e traceEvent) String() string {
	a := "free "
	if e.alloc {
		a = "alloc"
	}
	s := fmt.Sprintf("%s %d bytes", a, e.size)
	if e.where != "" {
		s += " (" + e.where + ")"
	}
	return s
}

// readSnapshotTrace reads the first device's allocs and frees from a
// snapshot pickle, named path in errors, each with its innermost frame:
// a file and its line, or an ONNX node.
func readSnapshotTrace(file io.Reader, path string) ([]traceEvent, error) {
	v, err := pickle.Read(file)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: snapshot %s: %w", path, err)
	}
	top, ok := v.(pickle.Dict)
	if !ok {
		return nil, fmt.Errorf("onnxmem: snapshot %s: not a dict of segments and device_traces (torch.cuda.memory._dump_snapshot writes one)", path)
	}
	traces, _ := get(top, "device_traces").(pickle.List)
	if len(traces) == 0 {
		return nil, fmt.Errorf("onnxmem: snapshot %s: no device_traces: record with torch.cuda.memory._record_memory_history() before the step", path)
	}
	var out []traceEvent
	for _, dev := range traces {
		evs, _ := dev.(pickle.List)
		if len(evs) == 0 {
			continue
		}
		for _, e := range evs {
			d, ok := e.(pickle.Dict)
			if !ok {
				continue
			}
			action, _ := get(d, "action").(string)
			if action != "alloc" && action != "free_completed" {
				continue
			}
			size, _ := get(d, "size").(int64)
			te := traceEvent{alloc: action == "alloc", size: size}
			if frames, _ := get(d, "frames").(pickle.List); len(frames) > 0 {
				if fr, ok := frames[0].(pickle.Dict); ok {
					name, _ := get(fr, "filename").(string)
					line, _ := get(fr, "line").(int64)
					te.where = name
					if line != 0 {
						te.where = fmt.Sprintf("%s:%d", name, line)
					}
				}
			}
			out = append(out, te)
		}
		break // the first device with events
	}
	return out, nil
}

func get(d pickle.Dict, key string) any {
	for _, it := range d {
		if it.Key == key {
			return it.Value
		}
	}
	return nil
}

// peakAbove returns the highest requested bytes a trace reaches above
// where it starts.
func peakAbove(ev []traceEvent) int64 {
	var cur, peak int64
	for _, e := range ev {
		if e.alloc {
			cur += e.size
		} else {
			cur -= e.size
		}
		peak = max(peak, cur)
	}
	return peak
}

func printDiff(w io.Writer, model, path string, real, sim []traceEvent) error {
	fmt.Fprintf(w, "snapshot %s: %d allocs and frees\nsimulated %s: %d\n", path, len(real), model, len(sim))
	first := -1
	for i := 0; i < min(len(real), len(sim)); i++ {
		if real[i].alloc != sim[i].alloc || real[i].size != sim[i].size {
			first = i
			break
		}
	}
	if first < 0 && len(real) != len(sim) {
		first = min(len(real), len(sim))
	}
	same := 0
	for i := 0; i < min(len(real), len(sim)); i++ {
		if real[i].alloc == sim[i].alloc && real[i].size == sim[i].size {
			same++
		}
	}
	fmt.Fprintf(w, "the same event at the same place: %d of %d\n", same, max(len(real), len(sim)))
	if first < 0 {
		fmt.Fprintln(w, "the two traces agree event for event")
	} else {
		fmt.Fprintf(w, "they first part at event %d:\n", first)
		for i := max(0, first-2); i <= min(first+2, max(len(real), len(sim))-1); i++ {
			r, s := "-", "-"
			if i < len(real) {
				r = real[i].String()
			}
			if i < len(sim) {
				s = sim[i].String()
			}
			fmt.Fprintf(w, "  %6d  snapshot  %s\n          simulated %s\n", i, r, s)
		}
	}
	pr, ps := peakAbove(real), peakAbove(sim)
	fmt.Fprintf(w, "requested peak above the start: snapshot %s GiB, simulated %s GiB (%+.2f%%)\n", gib(pr), gib(ps), 100*float64(ps-pr)/float64(max(pr, 1)))
	return nil
}
