package allocator

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// traceEvent is one allocator event of a recorded trace: an allocation or a
// free of the block at Addr, with the requested size.
type traceEvent struct {
	Alloc       bool
	Addr, Bytes int64
}

// UnmarshalJSON decodes [kind, address, bytes, where], kind "a" or "f".
func (e *traceEvent) UnmarshalJSON(data []byte) error {
	var raw [4]json.RawMessage
	var kind string
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[0], &kind); err != nil {
		return err
	}
	e.Alloc = kind == "a"
	if err := json.Unmarshal(raw[1], &e.Addr); err != nil {
		return err
	}
	return json.Unmarshal(raw[2], &e.Bytes)
}

// measuredTrace is one file of shared/groundtruth/traces: the allocator
// events of one model step, recorded on an H200 with
// torch.cuda.memory._record_memory_history, and the step's memory_stats.
type measuredTrace struct {
	Result struct {
		M0           int64 `json:"m0"`
		Peak         int64 `json:"peak"`
		PeakReserved int64 `json:"peak_reserved"`
	} `json:"result"`
	Events []traceEvent `json:"events"`
}

// replayTrace runs a recorded step through an Allocator and returns the
// simulated peak above the bytes allocated once the step's first allocation
// (the input batch) is made, the figure to compare with peak − m0, and the
// reserved peak of the measured step.
//
// The trace opens with the frees of the previous step's gradients, whose
// blocks the recording never saw allocated. Their sizes stand in for the
// resident parameters (same tensors, same order): they are allocated first
// and the cache emptied, as after loading the model. The rest of the trace
// then runs twice: a warm-up, which leaves its gradients allocated and the
// cache holding its segments, then the measured step, which starts by
// freeing those gradients, as the recorded one did.
func replayTrace(tr *measuredTrace) (peak, reserved int64) {
	a := New()
	lead := 0
	for lead < len(tr.Events) && !tr.Events[lead].Alloc {
		a.Malloc(tr.Events[lead].Bytes)
		lead++
	}
	a.EmptyCache()
	step := tr.Events[lead:]
	var left map[int64]ID
	for run := range 2 {
		ids := map[int64]ID{}
		for _, id := range left { // the previous step's gradients
			a.Free(id)
		}
		var m0 int64
		for i, e := range step {
			if e.Alloc {
				ids[e.Addr] = a.Malloc(e.Bytes)
				if i == 0 {
					m0 = a.Stats().Allocated
					a.ResetPeaks()
				}
			} else if id, ok := ids[e.Addr]; ok {
				a.Free(id)
				delete(ids, e.Addr)
			}
		}
		left = ids
		if run == 1 {
			return a.Stats().PeakAllocated - m0, a.Stats().PeakReserved
		}
	}
	return 0, 0
}

// TestTraces replays the recorded model steps of shared/groundtruth/traces
// (fp32 and AMP, with and without checkpointing) through the simulated
// allocator, fed the exact requests PyTorch made, and requires the peak above
// m0 within 0.1% of the measured one and the reserved peak equal to the
// byte: the allocator's rounding, splitting and caching, not the schedule,
// are under test here. (Each traced step ran in a process that had only
// loaded the model, so its segments are its own.)
func TestTraces(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(onnxbuild.Shared(t, "groundtruth/traces"), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no traces: %v", err)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-32s %7s %14s %14s %8s %14s %14s\n", "trace", "events", "measured", "simulated", "error", "reserved", "simulated")
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var tr measuredTrace
		if err := json.Unmarshal(data, &tr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := tr.Result.Peak - tr.Result.M0
		got, res := replayTrace(&tr)
		rel := float64(got-want) / float64(want)
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		fmt.Fprintf(&table, "%-32s %7d %14d %14d %+7.3f%% %14d %14d\n", name, len(tr.Events), want, got, 100*rel, tr.Result.PeakReserved, res)
		if res != tr.Result.PeakReserved {
			t.Errorf("%s: reserved peak simulated %d, measured %d", name, res, tr.Result.PeakReserved)
		}
		if rel > 0.001 || rel < -0.001 {
			t.Errorf("%s: peak − m0 simulated %d, measured %d (%+.3f%%), beyond 0.1%%", name, got, want, 100*rel)
		}
	}
	t.Log("\n" + table.String())
}
