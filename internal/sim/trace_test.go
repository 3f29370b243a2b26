package sim_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestTraces compares onnxmem's event program with the allocation-level
// traces of real steps in ../shared/groundtruth/traces: event by event, after
// dropping on both sides the allocations freed right away (cuDNN workspaces
// and kernel scratch, whose sizes cuDNN's heuristics choose) and the loss's
// few-byte scalars. It names the largest difference, in bytes, and checks
// the predicted peak against the trace's.
func TestTraces(t *testing.T) {
	dir := onnxbuild.Shared(t, "groundtruth/traces")
	files, err := filepath.Glob(filepath.Join(dir, "trace-*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no traces in %s", dir)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			var cfg string
			var batch int64
			var prec string
			var k int
			if _, err := fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(name, "trace-"), "-", " "), "yolov9 %s b%d %s k%d", &cfg, &batch, &prec, &k); err != nil {
				t.Fatalf("trace name %s: %v", name, err)
			}
			cfg = "yolov9-" + cfg
			m, err := sim.Load(filepath.Join(onnxbuild.SharedDir, "yolov9", cfg+"-train.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			checkTrace(t, name, readTrace(t, f), m, sim.Options{Batch: batch, Height: 640, Width: 640, AMP: prec == "amp", Segments: k}, true)
		})
	}
}

// TestOwnTraces does what TestTraces does on the traces that
// calibration/yolov9_segments.py recorded (yolov9-s with four segments, at
// batch 32 under AMP and batch 4 in float32, where the peak falls in the
// recomputation of a 1×1 conv), with the built-in models: they need no
// ../shared.
func TestOwnTraces(t *testing.T) {
	files, err := filepath.Glob(measured.Path("yolov9_segments/trace-*.json"))
	if err != nil || len(files) == 0 {
		t.Fatal("no traces in " + measured.Path("yolov9_segments"))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			var cfg, prec string
			var batch int64
			var k int
			if _, err := fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(name, "trace-"), "-", " "), "%s b%d %s k%d", &cfg, &batch, &prec, &k); err != nil {
				t.Fatalf("trace name %s: %v", name, err)
			}
			m, err := sim.Builtin("yolov9-" + cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkTrace(t, name, readTrace(t, f), m, sim.Options{Batch: batch, Height: 640, Width: 640, AMP: prec == "amp", Segments: k}, false)
		})
	}
}

// checkTrace compares the program of sc with a measured trace.
//
// fresh says the trace's process ran nothing before the step, so that its
// reserved peak is the step's own and held to 1.5%; the traces of
// calibration/yolov9_segments.py ran after other scenarios.
func checkTrace(t *testing.T, name string, tr *trace, m *sim.Model, sc sim.Options, fresh bool) {
	t.Helper()
	p, err := m.Program(sc)
	if err != nil {
		t.Fatal(err)
	}
	r := sim.Run(p, sc)
	got := programTokens(p)
	want := tr.tokens()
	d := diffTokens(want, got)
	t.Logf("%s: %d measured and %d predicted events after dropping transients; %d differ (%.2f%%)",
		name, len(want), len(got), d.count, 100*float64(d.count)/float64(len(want)))
	if d.count > 0 {
		t.Logf("largest difference: %s", d.largest)
	}
	peak := tr.Result["peak"] - tr.Result["m0"]
	pred := r.Peak - r.M0
	t.Logf("peak above m0: measured %.1f MiB, predicted %.1f MiB (%+.2f%%)", mib(peak), mib(pred), 100*float64(pred-peak)/float64(tr.Result["peak"]))
	if e := float64(pred-peak) / float64(tr.Result["peak"]); e > 0.01 || e < -0.01 {
		t.Errorf("peak off by %.2f%% of the measured peak", 100*e)
	}
	res := tr.Result["peak_reserved"]
	e := float64(r.PeakReserved-res) / float64(res)
	t.Logf("peak reserved: measured %.1f MiB, predicted %.1f MiB (%+.2f%%)", mib(res), mib(r.PeakReserved), 100*e)
	// A trace replayed from its own requests gives its measured reserved
	// peak (allocator.TestTraces): the step ran without an
	// earlier scenario's cache, so the program's requests alone decide
	// it. yolov9-s under AMP differs in the order autocast frees its
	// weight copies; upsampling allocated its contiguous copy before its
	// output until a trace showed otherwise, which put yolov9-c's float32
	// step 104 MiB high.
	if fresh && (e > 0.015 || e < -0.015) {
		t.Errorf("peak reserved off by %+.2f%%, beyond 1.5%%", 100*e)
	}
	// A regression in the event model shows up as many more differences:
	// today they are the conv-bias gradient's reduction scratch, autocast's
	// cache freeing order and a few end-of-forward holds of the harness's
	// segmented loop.
	if frac := float64(d.count) / float64(len(want)); frac > 0.05 {
		t.Errorf("%.1f%% of events differ; the largest difference: %s", 100*frac, d.largest)
	}
}

type trace struct {
	Result map[string]int64 `json:"result"`
	Events [][4]any         `json:"events"`
}

func readTrace(t *testing.T, path string) *trace {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr trace
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &tr
}

// token is one allocation event: alloc or free, and its requested bytes.
type token struct {
	free  bool
	bytes int64
	where string
}

func (k token) String() string {
	op := "alloc"
	if k.free {
		op = "free"
	}
	return fmt.Sprintf("%s %d (%s)", op, k.bytes, k.where)
}

// tokens returns the trace's step: without the leading frees of the previous
// step's gradients and the input's allocation, which the program holds as
// resident.
func (tr *trace) tokens() []token {
	ev := tr.Events
	i := 0
	for i < len(ev) && ev[i][0] == "f" {
		i++
	}
	live := map[float64]int64{}
	var out []token
	for _, e := range ev[i+1:] {
		addr, size := e[1].(float64), int64(e[2].(float64))
		where, _ := e[3].(string)
		if e[0] == "a" {
			live[addr] = size
			out = append(out, token{bytes: size, where: where})
		} else if _, ok := live[addr]; ok {
			delete(live, addr)
			out = append(out, token{free: true, bytes: size, where: where})
		}
	}
	return dropTransients(out)
}

func programTokens(p *schedule.Program) []token {
	var out []token
	for _, e := range p.Events[:p.StepEnd] {
		buf := p.Buffers[e.Buf]
		where := e.Phase.String()
		if e.Node >= 0 {
			where += " " + p.Graph.Nodes[e.Node].Name
		}
		out = append(out, token{free: e.Free, bytes: buf.Bytes, where: where})
	}
	return dropTransients(out)
}

// dropTransients removes allocations freed by the next event, and events of
// fewer than 1 KiB (the loss's scalars and reduction scratch).
func dropTransients(in []token) []token {
	var out []token
	for i := 0; i < len(in); i++ {
		if in[i].bytes < 1024 {
			continue
		}
		if i+1 < len(in) && !in[i].free && in[i+1].free && in[i].bytes == in[i+1].bytes {
			i++
			continue
		}
		out = append(out, in[i])
	}
	return out
}

type tokenDiff struct {
	count   int
	largest string
}

// diffTokens aligns two event lists on (free, bytes) and returns the number
// of events outside the common subsequence and the largest of them by bytes.
func diffTokens(a, b []token) tokenDiff {
	var res tokenDiff
	var big int64
	for _, op := range align(len(a), len(b), func(i, j int) bool { return a[i].free == b[j].free && a[i].bytes == b[j].bytes }) {
		var k token
		side := ""
		switch {
		case op.m >= 0 && op.p >= 0:
			continue
		case op.m >= 0:
			k, side = a[op.m], "measured only: "
		default:
			k, side = b[op.p], "predicted only: "
		}
		res.count++
		if k.bytes > big {
			big, res.largest = k.bytes, side+k.String()
		}
	}
	return res
}
