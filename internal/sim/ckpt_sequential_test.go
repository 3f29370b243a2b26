package sim_test

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The measurement of calibration/checkpoint_sequential.py (see
// calibration/README.md): an nn.Sequential of 8 Conv+BN+SiLU blocks, batch 8,
// 3x160x160, fp32 and autocast, with checkpoint_sequential at 0, 2 and 4
// segments, on an H200.
var (
	ckptONNX    = measured.Path("ckpt_net.onnx")
	ckptResults = measured.Path("ckpt_results.json")
)

type ckptResult struct {
	Input     []int64 `json:"input"`
	Scenarios []struct {
		AMP          bool              `json:"amp"`
		Segments     int               `json:"segments"`
		M0           int64             `json:"m0"`
		AfterFwd     int64             `json:"after_fwd"`
		Peak         int64             `json:"peak"`
		PeakReq      int64             `json:"peak_req"`
		PeakReserved int64             `json:"peak_reserved"`
		AfterBwd     int64             `json:"after_bwd"`
		Events       []json.RawMessage `json:"events"`
		Error        string            `json:"error"`
	} `json:"scenarios"`
}

// ckptEvent is one allocator event of either side.
type ckptEvent struct {
	alloc bool
	size  int64
	block int64 // measured: the block id; predicted: the buffer
	where string
	index int    // position in the unfiltered sequence
	fwd   bool   // in the forward (before the loss)
	kind  string // predicted: the buffer's kind
	// phase is schedule.Phase's name; on the measured side, a backward event
	// with torch/utils/checkpoint.py on its Python stack is a recomputation.
	phase string
}

func (e ckptEvent) String() string {
	a := "free"
	if e.alloc {
		a = "alloc"
	}
	return fmt.Sprintf("%s %d (%s)", a, e.size, e.where)
}

// Event filters, applied to both sides in this order.
//
//   - Immediate pairs, an alloc directly followed by the free of the same
//     block, are cuDNN workspaces (on the measured side nothing else in this
//     network makes one; on the predicted side only buffers of kind workspace
//     are taken, so that other immediate pairs stay differences). Their sizes
//     come from cudnn.Card.Workspace, a rule of thumb that is exact for some
//     shapes only, so they are left out of the alignment, listed on their own,
//     and the program is run a second time with the measured ones put in their
//     place (ckptWithWorkspaces): that checks the schedule and the allocator
//     apart from cuDNN's heuristics.
//   - Events under ckptSmall bytes: batch-norm statistics and weight and bias
//     gradients (4·C bytes here, C ≤ 128), the loss scalars, the reduction
//     scratch of o.sum() (100 and 4 B) and the backward's seed. They fall in
//     the small pool and move the peak by at most a few KiB.
//   - The frees that end the forward are put in order of size on both sides:
//     under autocast they are the cast weights of the checkpointed layers,
//     which autocast's cache (a hash map) frees in no set order when it exits.
const ckptSmall = 1024

// ckptMaxDiff is the share of the aligned events (measured only plus
// predicted only, over measured plus predicted) above which the test fails.
// On the measurement in calibration/results the engine leaves 0 to 2.7%
// unmatched, from two known differences (calibration/README.md, "Checkpointed
// nn.Sequential"): the recomputation allocates and frees the output of a
// checkpointed range's last SiLU, which PyTorch never computes (2 events per
// checkpointed range), and under autocast the range's input is freed after
// the weight's ToCopyBackward instead of before it (2 per range after the
// first). One new systematic error, an extra or missing tensor in every layer
// (an alloc and a free in each of the 8 layers' ~30 events), would leave about
// 6% unmatched: 5% lets the known ones pass and catches that.
const ckptMaxDiff = 0.05

func ckptMeasured(t *testing.T, raw []json.RawMessage) []ckptEvent {
	out := make([]ckptEvent, 0, len(raw))
	for i, r := range raw {
		var f []any
		if err := json.Unmarshal(r, &f); err != nil || len(f) < 5 {
			t.Fatalf("event %d: %s", i, r)
		}
		e := ckptEvent{alloc: f[0] == "a", size: int64(f[1].(float64)), block: int64(f[2].(float64)), index: i}
		e.where = f[3].(string)
		e.fwd = e.where == "fwd"
		e.phase = map[string]string{"fwd": "forward", "loss": "loss", "bwd": "backward", "cleanup": "cleanup"}[e.where]
		if e.where == "bwd" && strings.HasSuffix(f[4].(string), "+ckpt") {
			e.phase = "recompute"
		}
		if w := f[4].(string); w != "" {
			e.where += " " + w
		}
		out = append(out, e)
	}
	return out
}

func ckptPredicted(p *schedule.Program) []ckptEvent {
	out := make([]ckptEvent, 0, len(p.Events))
	for i, e := range p.Events {
		b := p.Buffers[e.Buf]
		if b.Kind == schedule.Scalar {
			continue
		}
		w := e.Phase.String() + " " + b.Kind.String()
		if e.Node >= 0 {
			w += " " + p.Graph.Nodes[e.Node].Name
		}
		out = append(out, ckptEvent{alloc: !e.Free, size: b.Bytes, block: int64(e.Buf), where: w, index: i,
			fwd: e.Phase == schedule.Forward, kind: b.Kind.String(), phase: e.Phase.String()})
	}
	return out
}

// ckptPair is an immediate alloc/free pair taken out of a sequence: its alloc,
// and gap, the number of kept events before it.
type ckptPair struct {
	ev  ckptEvent
	gap int
}

// ckptFilter applies the filters above to one side.
func ckptFilter(ev []ckptEvent, predicted bool) (kept []ckptEvent, pairs []ckptPair) {
	for i := 0; i < len(ev); i++ {
		if i+1 < len(ev) && ev[i].alloc && !ev[i+1].alloc && ev[i].block == ev[i+1].block &&
			ev[i].size >= ckptSmall && (!predicted || ev[i].kind == "workspace") {
			pairs = append(pairs, ckptPair{ev[i], len(kept)})
			i++
			continue
		}
		if ev[i].size >= ckptSmall {
			kept = append(kept, ev[i])
		}
	}
	last := -1
	for i, e := range kept {
		if e.fwd && e.alloc {
			last = i
		}
	}
	end := last + 1
	for end < len(kept) && kept[end].fwd && !kept[end].alloc {
		end++
	}
	sort.SliceStable(kept[last+1:end], func(i, j int) bool { return kept[last+1+i].size < kept[last+1+j].size })
	return kept, pairs
}

// ckptWithWorkspaces returns a copy of p whose workspaces are the measured
// ones: the measured pairs are mapped through the alignment to the gap between
// the same predicted events, replace the predicted workspaces there in order,
// and those left over on either side are inserted or removed.
func ckptWithWorkspaces(p *schedule.Program, ops []alignOp, pred []ckptEvent, mPairs, pPairs []ckptPair) *schedule.Program {
	// The predicted gap of each measured gap.
	gapOf := make(map[int]int)
	np := 0
	for _, op := range ops {
		if op.m >= 0 {
			gapOf[op.m] = np
		}
		if op.p >= 0 {
			np++
		}
	}
	mByGap := map[int][]int64{}
	for _, mp := range mPairs {
		g, ok := gapOf[mp.gap]
		if !ok {
			g = len(pred)
		}
		mByGap[g] = append(mByGap[g], mp.ev.size)
	}
	pByGap := map[int][]ckptPair{}
	for _, pp := range pPairs {
		pByGap[pp.gap] = append(pByGap[pp.gap], pp)
	}
	size := map[int]int64{}     // alloc event → new size, 0 = removed
	insert := map[int][]int64{} // before this event
	for g, ms := range mByGap {
		ps := pByGap[g]
		for i, m := range ms {
			switch {
			case i < len(ps):
				size[ps[i].ev.index] = m
			case len(ps) > 0:
				at := ps[len(ps)-1].ev.index + 2
				insert[at] = append(insert[at], m)
			case g < len(pred):
				insert[pred[g].index] = append(insert[pred[g].index], m)
			default:
				insert[len(p.Events)] = append(insert[len(p.Events)], m)
			}
		}
		for i := len(ms); i < len(ps); i++ {
			size[ps[i].ev.index] = 0
		}
	}
	for g, ps := range pByGap {
		if len(mByGap[g]) == 0 {
			for _, pp := range ps {
				size[pp.ev.index] = 0
			}
		}
	}
	q := *p
	q.Buffers = append([]schedule.Buffer(nil), p.Buffers...)
	q.Events = nil
	at := make([]int, len(p.Events)+1)
	for i := 0; i <= len(p.Events); i++ {
		at[i] = len(q.Events)
		for _, m := range insert[i] {
			q.Buffers = append(q.Buffers, schedule.Buffer{Bytes: m, Kind: schedule.Workspace, Value: ir.NoValue, Node: -1})
			b := int32(len(q.Buffers) - 1)
			q.Events = append(q.Events, schedule.Event{Buf: b, Phase: schedule.Backward, Node: -1},
				schedule.Event{Buf: b, Free: true, Phase: schedule.Backward, Node: -1})
		}
		if i == len(p.Events) {
			break
		}
		e := p.Events[i]
		if n, ok := size[i]; ok {
			if n == 0 {
				i++ // and its free
				at[i] = len(q.Events)
				continue
			}
			q.Buffers[e.Buf].Bytes = n
		}
		q.Events = append(q.Events, e)
	}
	q.ForwardEnd, q.BackwardStart, q.BackwardEnd, q.StepEnd = at[p.ForwardEnd], at[p.BackwardStart], at[p.BackwardEnd], at[p.StepEnd]
	return &q
}

// ckptPeakAt returns the event after which the requested bytes of a sequence
// peak (a running sum of the sizes, relative to the start).
func ckptPeakAt(ev []ckptEvent) int {
	cur, best, at := int64(0), int64(0), -1
	for i, e := range ev {
		if e.alloc {
			cur += e.size
		} else {
			cur -= e.size
		}
		if cur > best {
			best, at = cur, i
		}
	}
	return at
}

// TestCkptSequential compares onnxmem with the measured step of a small
// checkpointed nn.Sequential (calibration/checkpoint_sequential.py): m0 and
// after_bwd exactly; the peak within max(1%, 1 MiB) and after_fwd within
// max(0.5%, 1 MiB), both with onnxmem's own cuDNN workspaces and with the
// measured ones; and the allocator's events one by one, aligned by align (see ckptMaxDiff). The log has the table, the workspace
// sizes, every difference and the whole alignment of each scenario.
func TestCkptSequential(t *testing.T) {
	m, err := sim.Load(ckptONNX)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(ckptResults)
	if err != nil {
		t.Fatal(err)
	}
	var res ckptResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Input) != 4 || len(res.Scenarios) != 6 {
		t.Fatalf("%s: input %v, %d scenarios, want 4 dims and 6", ckptResults, res.Input, len(res.Scenarios))
	}
	if got := m.Layers(); got != 8 {
		t.Fatalf("%s: %d top-level layers, want 8", ckptONNX, got)
	}
	const mib = 1 << 20
	pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
	var table, diffs strings.Builder
	fmt.Fprintf(&table, "%-5s %4s  %8s %8s %7s %8s %7s  %8s %8s %7s %8s %7s  %8s %8s %7s\n",
		"amp", "segs", "peak", "onnxmem", "error", "meas.ws", "error",
		"aft_fwd", "onnxmem", "error", "meas.ws", "error", "peak_req", "onnxmem", "error")
	for _, s := range res.Scenarios {
		if s.Error != "" {
			t.Errorf("amp=%v segments=%d: the measurement failed: %s", s.AMP, s.Segments, s.Error)
			continue
		}
		sc := sim.Options{Batch: res.Input[0], Height: res.Input[2], Width: res.Input[3], AMP: s.AMP, Segments: s.Segments}
		p, err := m.Program(sc)
		if err != nil {
			t.Fatal(err)
		}
		r := sim.Run(p, sc)
		name := fmt.Sprintf("amp=%v segments=%d", s.AMP, s.Segments)
		if r.M0 != s.M0 || r.AfterBackward != s.AfterBwd {
			t.Errorf("%s: m0 %d and after_bwd %d, measured %d and %d", name, r.M0, r.AfterBackward, s.M0, s.AfterBwd)
		}

		// Event by event.
		all := ckptMeasured(t, s.Events)
		allP := ckptPredicted(p)
		meas, mPairs := ckptFilter(all, false)
		pred, pPairs := ckptFilter(allP, true)
		ops := align(len(meas), len(pred), func(i, j int) bool {
			return meas[i].alloc == pred[j].alloc && meas[i].size == pred[j].size && meas[i].phase == pred[j].phase
		})
		var onlyM, onlyP int
		first := -1
		for k, op := range ops {
			if op.m < 0 || op.p < 0 {
				if first < 0 {
					first = k
				}
				if op.p < 0 {
					onlyM++
				} else {
					onlyP++
				}
			}
		}
		frac := float64(onlyM+onlyP) / float64(len(meas)+len(pred))

		// The same program with the measured workspaces.
		q := ckptWithWorkspaces(p, ops, pred, mPairs, pPairs)
		rq := sim.Run(q, sc)

		fmt.Fprintf(&table, "%-5v %4d  %8.3f %8.3f %+6.2f%% %8.3f %+6.2f%%  %8.3f %8.3f %+6.2f%% %8.3f %+6.2f%%  %8.3f %8.3f %+6.2f%%\n",
			s.AMP, s.Segments, float64(s.Peak)/mib, float64(r.Peak)/mib, pct(r.Peak, s.Peak),
			float64(rq.Peak)/mib, pct(rq.Peak, s.Peak),
			float64(s.AfterFwd)/mib, float64(r.AfterForward)/mib, pct(r.AfterForward, s.AfterFwd),
			float64(rq.AfterForward)/mib, pct(rq.AfterForward, s.AfterFwd),
			float64(s.PeakReq)/mib, float64(r.PeakRequested)/mib, pct(r.PeakRequested, s.PeakReq))
		// This network is small and its peak falls in the backward, inside
		// a conv's backward-filter call, so the peak is mostly a cuDNN
		// workspace, which onnxmem's per-shape rule (cudnn.Rule) only
		// approximates: up to 13% off here, against under 1% on the YOLOv9
		// steps. The bound guards against gross regressions.
		if tol := max(s.Peak*15/100, mib); abs64(r.Peak-s.Peak) > tol {
			t.Errorf("%s: peak %d, measured %d (%+.2f%%, tolerance %d B; %d with the measured workspaces)",
				name, r.Peak, s.Peak, pct(r.Peak, s.Peak), tol, rq.Peak)
		}
		// The schedule and the allocator alone: the program with the cuDNN
		// workspaces that were measured must give the measured peak.
		if tol := int64(64 << 10); abs64(rq.Peak-s.Peak) > tol {
			t.Errorf("%s: peak with the measured workspaces %d, measured %d (%+.2f%%, tolerance %d B)",
				name, rq.Peak, s.Peak, pct(rq.Peak, s.Peak), tol)
		}
		if tol := max(s.AfterFwd/200, mib); abs64(r.AfterForward-s.AfterFwd) > tol {
			t.Errorf("%s: after_fwd %d, measured %d (%+.2f%%, tolerance %d B)", name, r.AfterForward, s.AfterFwd, pct(r.AfterForward, s.AfterFwd), tol)
		}

		mAt, pAt := ckptPeakAt(all), ckptPeakAt(allP)
		fmt.Fprintf(&diffs, "%s: %d measured and %d predicted events (of %d and %d), %d measured only, %d predicted only (%.1f%%)\n",
			name, len(meas), len(pred), len(s.Events), len(p.Events), onlyM, onlyP, 100*frac)
		fmt.Fprintf(&diffs, "  requested bytes peak after measured event %d: %s; predicted %d: %s; allocator peak predicted at event %d (%s %s)\n",
			mAt, all[mAt], allP[pAt].index, allP[pAt], r.PeakEvent, r.PeakPhase, r.PeakNode)
		fmt.Fprintf(&diffs, "  workspaces: %d measured %v\n              %d predicted %v\n", len(mPairs), ckptSizes(mPairs), len(pPairs), ckptSizes(pPairs))
		if first >= 0 {
			fmt.Fprintf(&diffs, "  first difference %s\n", ckptDescribe(ops[first], meas, pred))
			for _, op := range ops {
				if op.m >= 0 && op.p >= 0 {
					continue
				}
				fmt.Fprintf(&diffs, "    %s\n", ckptLine(op, meas, pred))
			}
		}
		var al strings.Builder
		for _, op := range ops {
			fmt.Fprintf(&al, "    %s\n", ckptLine(op, meas, pred))
		}
		t.Logf("%s: alignment\n%s", name, al.String())
		// See the comment on ckptMaxDiff.
		if frac > ckptMaxDiff {
			t.Errorf("%s: %.1f%% of the events differ (more than %.0f%%); first difference %s", name, 100*frac, 100*ckptMaxDiff, ckptDescribe(ops[first], meas, pred))
		}
	}
	t.Logf("measured vs predicted (MiB); meas.ws = onnxmem's program with the measured cuDNN workspaces\n%s\nevents (>= %d B, without workspaces)\n%s", table.String(), ckptSmall, diffs.String())
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func ckptSizes(ev []ckptPair) []int64 {
	out := make([]int64, len(ev))
	for i, e := range ev {
		out[i] = e.ev.size
	}
	return out
}

func ckptDescribe(op alignOp, meas, pred []ckptEvent) string {
	switch {
	case op.m >= 0 && op.p < 0:
		return fmt.Sprintf("at measured event %d: measured %s, not predicted", meas[op.m].index, meas[op.m])
	case op.p >= 0 && op.m < 0:
		return fmt.Sprintf("at predicted event %d: predicted %s, not measured", pred[op.p].index, pred[op.p])
	}
	return "match"
}

func ckptLine(op alignOp, meas, pred []ckptEvent) string {
	l, r := "", ""
	mark := "  "
	if op.m >= 0 {
		l = fmt.Sprintf("%3d %s", meas[op.m].index, meas[op.m])
	}
	if op.p >= 0 {
		r = fmt.Sprintf("%3d %s", pred[op.p].index, pred[op.p])
	}
	if op.m < 0 || op.p < 0 {
		mark = "≠ "
	}
	return fmt.Sprintf("%s%-40s | %s", mark, l, r)
}

// TestRecomputeStopKeepsLaterReads checks the early stop of a non-reentrant
// checkpoint's recomputation on yolov9-e with two segments, whose first
// range ends in an ADown (layer 23): the recomputation stops once the second
// branch's SiLU has packed its clone, before the cat that reads the first
// branch, so the first branch (the batch norm's storage that the in-place
// SiLU returned) stays referenced by the module's frame until the stop
// unwinds it, innermost first: the second branch's batch norm output, then
// the first's. The H200 trace of that step (calibration/results/
// harness_traces.tgz, yolov9-e fp32 K=2 batch 1) frees them so, and its
// requested peak, which falls there, needs the first branch alive.
func TestRecomputeStopKeepsLaterReads(t *testing.T) {
	m, err := sim.Builtin("yolov9-e")
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Program(sim.Options{Batch: 1, Height: 640, Width: 640, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The recomputation's allocations of each branch's batch norm output,
	// and where each is freed.
	alloc := map[string]int32{}
	lastAlloc := -1
	frees := map[int32]int{}
	for i, e := range p.Events {
		if e.Phase != schedule.Recompute || e.Node < 0 {
			continue
		}
		name := p.Graph.Nodes[e.Node].Name
		if e.Free {
			frees[e.Buf] = i
			continue
		}
		if strings.HasPrefix(name, "/model.23/") {
			lastAlloc = i
		}
		if name == "/model.23/cv1/bn/BatchNormalization" || name == "/model.23/cv2/bn/BatchNormalization" {
			if p.Buffers[e.Buf].Kind == schedule.Activation {
				alloc[name] = e.Buf
			}
		}
	}
	cv1, ok1 := alloc["/model.23/cv1/bn/BatchNormalization"]
	cv2, ok2 := alloc["/model.23/cv2/bn/BatchNormalization"]
	if !ok1 || !ok2 || lastAlloc < 0 {
		t.Fatalf("no recomputation of layer 23's branches in yolov9-e's program (%v)", alloc)
	}
	f1, f2 := frees[cv1], frees[cv2]
	if f1 <= lastAlloc || f2 <= lastAlloc || f2 > f1 {
		t.Errorf("the first branch is freed at event %d and the second's batch norm output at %d; want both after the recomputation's last allocation (%d), the second first", f1, f2, lastAlloc)
	}
}
