package loss

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// yolov9s is one branch of yolov9-s's head at 640: 144 channels (64 DFL
// bins + 80 classes) over 80², 40² and 20² cells, 8400 anchors.
var yolov9s = [][3]int64{{144, 80, 80}, {144, 40, 40}, {144, 20, 20}}

func input(batch, boxes int64, amp bool) Input {
	dt := ir.Float32
	if amp {
		dt = ir.Float16
	}
	return Input{Batch: batch, Maps: [][][3]int64{yolov9s, yolov9s}, DType: dt, AMP: amp, Boxes: boxes}
}

// recTape is a Tape that checks every free and keeps the live bytes.
type recTape struct {
	t     *testing.T
	next  schedule.Buf
	live  map[schedule.Buf]int64
	what  map[schedule.Buf]string
	cur   int64
	peak  int64
	frees int
}

func newTape(t *testing.T) *recTape {
	return &recTape{t: t, live: map[schedule.Buf]int64{}, what: map[schedule.Buf]string{}}
}

func (r *recTape) Alloc(bytes int64, what string) schedule.Buf {
	if bytes <= 0 {
		r.t.Fatalf("allocation of %d bytes for %q", bytes, what)
	}
	if !strings.HasPrefix(what, "loss ") {
		r.t.Fatalf("allocation %q does not say it is the loss's", what)
	}
	r.next++
	r.live[r.next] = bytes
	r.what[r.next] = what
	r.cur += bytes
	r.peak = max(r.peak, r.cur)
	return r.next
}

func (r *recTape) Free(b schedule.Buf) {
	n, ok := r.live[b]
	if !ok {
		r.t.Fatalf("free of buffer %d, which is not live", b)
	}
	delete(r.live, b)
	r.cur -= n
	r.frees++
}

// TestBalanced checks that everything the loss allocates is freed by the end
// of its backward except the returned gradients, and that every saved buffer
// is freed in the backward.
func TestBalanced(t *testing.T) {
	l := NewYOLOv9()
	for _, c := range []struct {
		batch, boxes int64
		amp          bool
	}{{2, 3, false}, {2, 3, true}, {4, 1, false}, {3, 0, false}, {3, 0, true}, {8, 64, true}, {1, 1000, false}} {
		t.Run(fmt.Sprintf("B%d_M%d_amp%v", c.batch, c.boxes, c.amp), func(t *testing.T) {
			in := input(c.batch, c.boxes, c.amp)
			r := newTape(t)
			saved := l.Forward(r, in)
			if len(saved) == 0 {
				t.Fatal("Forward saved nothing")
			}
			if len(r.live) != len(saved) {
				t.Fatalf("after Forward %d buffers are live, %d saved", len(r.live), len(saved))
			}
			for _, b := range saved {
				if _, ok := r.live[b]; !ok {
					t.Fatalf("saved buffer %d is not live", b)
				}
			}
			grads := l.Backward(r, in, saved)
			for _, b := range saved {
				if _, ok := r.live[b]; ok {
					t.Errorf("saved %s outlives the backward", r.what[b])
				}
			}
			if len(grads) != len(in.Maps) {
				t.Fatalf("%d gradients for %d branches", len(grads), len(in.Maps))
			}
			if len(r.live) != len(grads) {
				for b := range r.live {
					t.Logf("live: %s", r.what[b])
				}
				t.Fatalf("after Backward %d buffers are live, want the %d gradients", len(r.live), len(grads))
			}
			for _, g := range grads {
				if _, ok := r.live[g]; !ok {
					t.Fatalf("gradient %d is not live", g)
				}
			}
		})
	}
}

// TestGradSizes checks that each branch's gradient is [B, C, A] in the maps'
// type, in branch order.
func TestGradSizes(t *testing.T) {
	l := NewYOLOv9()
	one := [][3]int64{{84, 40, 40}, {84, 20, 20}} // 20 classes, 2000 anchors
	for _, amp := range []bool{false, true} {
		in := input(5, 7, amp)
		in.Maps = [][][3]int64{yolov9s, one}
		r := newTape(t)
		grads := l.Backward(r, in, l.Forward(r, in))
		es := in.DType.Size()
		want := []int64{5 * 144 * 8400 * es, 5 * 84 * 2000 * es}
		for i, g := range grads {
			if r.live[g] != want[i] {
				t.Errorf("amp %v: branch %d gradient is %d bytes, want %d", amp, i+1, r.live[g], want[i])
			}
			if !strings.Contains(r.what[g], "grad of the maps") {
				t.Errorf("amp %v: branch %d gradient is %q", amp, i+1, r.what[g])
			}
		}
	}
}

// TestKeySizes checks hand-computed sizes of the main tensors for B=2, M=3
// and yolov9-s's maps (A = 8400, nc = 80, 30 foreground anchors per image).
func TestKeySizes(t *testing.T) {
	const (
		B, M, A, nc, C = 2, 3, 8400, 80, 144
		F              = B * 3 * 10 // each box keeps its topk = 10 anchors
	)
	type want struct {
		name      string
		fp32, amp int64 // bytes; 0: not allocated
		savedFP32 bool  // saved for the backward without autocast
		savedAMP  bool  // and under autocast
		backward  bool
	}
	for _, w := range []want{
		{"targets.to(device)", B * M * 6 * 4, B * M * 6 * 4, false, false, false},
		{"b1 torch.cat(maps)", B * C * A * 4, B * C * A * 2, false, false, false},
		// Without autocast BCE saves pred_scores and target_scores
		// themselves; under autocast it saves its float32 copies.
		{"b1 pred_scores.contiguous()", B * A * nc * 4, B * A * nc * 2, true, false, false},
		{"b1 bbox_decode softmax", B * A * 64 * 4, B * A * 64 * 4, true, true, false},
		{"b1 bbox_decode softmax autocast copy", 0, B * A * 64 * 2, false, false, false},
		{"b1 assigner pd_scores (sigmoid)", B * A * nc * 4, B * A * nc * 2, false, false, false},
		{"b1 assigner bbox_scores", B * M * A * 4, B * M * A * 2, false, false, false},
		{"b1 assigner bbox_scores autocast float32", 0, B * M * A * 4, false, false, false},
		{"b1 assigner bbox_iou ciou", B * M * A * 4, B * M * A * 4, false, false, false},
		{"b1 assigner in_gts bbox_deltas", B * M * A * 4 * 4, B * M * A * 4 * 4, false, false, false},
		{"b1 assigner one_hot(topk_idxs)", B * M * 10 * A * 8, B * M * 10 * A * 8, false, false, false},
		{"b1 assigner is_in_topk sum", B * M * A * 8, B * M * A * 8, false, false, false},
		{"b1 assigner one_hot(max_overlaps_idx)", B * A * M * 8, B * A * M * 8, false, false, false},
		{"b1 assigner one_hot(target_labels)", B * A * nc * 8, B * A * nc * 8, false, false, false},
		{"b1 assigner target_scores", B * A * nc * 4, B * A * nc * 4, true, false, false},
		{"b1 cls BCE autocast input float32", 0, B * A * nc * 4, true, true, false},
		{"b1 cls BCE autocast target float32", 0, B * A * nc * 4, true, true, false},
		{"b1 cls BCE log_sigmoid", B * A * nc * 4, B * A * nc * 4, false, false, false},
		{"b1 dist_mask", B * A * 64, B * A * 64, true, true, false},
		{"b1 dfl pred nonzero", 64 * F * 3 * 8, 64 * F * 3 * 8, false, false, false},
		{"b1 dfl log_softmax left", 4 * F * 16 * 4, 4 * F * 16 * 2, true, true, false},
		{"b1 cls BCE backward grad", B * A * nc * 4, B * A * nc * 4, false, false, true},
		{"b1 dfl backward masked_scatter prefix sum", B * A * 64 * 8, B * A * 64 * 8, false, false, true},
		{"b1 bbox_decode backward softmax", B * A * 64 * 4, B * A * 64 * 2, false, false, true},
		{"b1 fg_mask.sum() int64 copy", B * A * 8, B * A * 8, false, false, false},
		{"b1 dfl backward gradient sum", 4 * F * 16 * 4, 4 * F * 16 * 2, false, false, true},
		{"b1 bbox_decode backward softmax grad·output", B * A * 64 * 4, B * A * 64 * 4, false, false, true},
		{"b1 grad of the maps (split backward cat)", B * C * A * 4, B * C * A * 2, false, false, true},
	} {
		for _, amp := range []bool{false, true} {
			bytes, saved := w.fp32, w.savedFP32
			if amp {
				bytes, saved = w.amp, w.savedAMP
			}
			var got []Allocation
			for _, a := range NewYOLOv9().Allocations(input(B, M, amp)) {
				if a.Name == w.name {
					got = append(got, a)
				}
			}
			if bytes == 0 {
				if len(got) != 0 {
					t.Errorf("amp %v: %s is allocated", amp, w.name)
				}
				continue
			}
			if len(got) != 1 {
				t.Errorf("amp %v: %d allocations named %s, want 1", amp, len(got), w.name)
				continue
			}
			a := got[0]
			if a.Bytes != bytes || a.Saved != saved || a.Backward != w.backward {
				t.Errorf("amp %v: %s is %d bytes (saved %v, backward %v), want %d (saved %v, backward %v)",
					amp, w.name, a.Bytes, a.Saved, a.Backward, bytes, saved, w.backward)
			}
		}
	}
}

// TestSavedMatchesForward checks that Allocations marks as saved exactly
// what Forward returns.
func TestSavedMatchesForward(t *testing.T) {
	for _, amp := range []bool{false, true} {
		in := input(3, 5, amp)
		r := newTape(t)
		saved := NewYOLOv9().Forward(r, in)
		var n, bytes, want int64
		for _, a := range NewYOLOv9().Allocations(in) {
			if a.Saved {
				n++
				bytes += a.Bytes
			}
		}
		for _, b := range saved {
			want += r.live[b]
		}
		if n != int64(len(saved)) || bytes != want {
			t.Errorf("amp %v: Allocations marks %d saved (%d bytes), Forward saves %d (%d bytes)", amp, n, bytes, len(saved), want)
		}
	}
}

// forwardPeak returns the peak live bytes of Forward on a recording tape.
func forwardPeak(t *testing.T, in Input) int64 {
	r := newTape(t)
	NewYOLOv9().Forward(r, in)
	return r.peak
}

// TestScaling checks that, once the boxes make the assigner the peak, the
// forward's peak grows with B·M·A by what is alive at the sum of the topk
// one_hot: the one_hot (10 int64), its sum (int64), align_metric, overlaps,
// mask_in_gts and their product (float32 each): 104 bytes; the [B, M, *]
// tensors add a little.
func TestScaling(t *testing.T) {
	const A = 8400
	for _, amp := range []bool{false, true} {
		p64 := forwardPeak(t, input(8, 64, amp))
		p96 := forwardPeak(t, input(8, 96, amp))
		p128 := forwardPeak(t, input(8, 128, amp))
		if p96-p64 != p128-p96 {
			t.Errorf("amp %v: peak not linear in M: %d, %d, %d", amp, p64, p96, p128)
		}
		dN := int64(8 * 32 * A)
		if d := p128 - p96; d < 104*dN || d > 105*dN {
			t.Errorf("amp %v: the peak grows by %.2f bytes per B·M·A, want 104 and a little", amp, float64(d)/float64(dN))
		}
		// Linear in B too: only the anchors do not scale with it.
		p := forwardPeak(t, input(16, 128, amp))
		if r := float64(p) / float64(p128); r < 1.999 || r > 2 {
			t.Errorf("amp %v: doubling B multiplies the peak by %.4f", amp, r)
		}
	}
	// With few boxes the [B, A, nc] tensors of the targets make the peak,
	// which then hardly moves with M.
	if p1, p2 := forwardPeak(t, input(8, 2, false)), forwardPeak(t, input(8, 4, false)); p2-p1 > 104*8*2*A {
		t.Errorf("with 2 and 4 boxes the peak moves by %d bytes", p2-p1)
	}
}

// TestPeaks checks Peaks against what must be alive at the peaks, counted
// from the shapes alone: in the forward, the assigner's one_hot of the topk
// candidates, [B, M, topk, A] int64, with the saved DFL softmaxes
// [B, A, 4, 16] of both branches; in the backward, both branches' gradients
// [B, C, A] in the maps' type.
func TestPeaks(t *testing.T) {
	const B, M, A, C = 4, 20, 8400, 144
	for _, amp := range []bool{false, true} {
		in := input(B, M, amp)
		f, b := NewYOLOv9().Peaks(in)
		es := int64(4)
		if amp {
			es = 2
		}
		oneHot := int64(B * M * 10 * A * 8)
		softmax := 2 * int64(B*A*4*16) * 4 // float32 under autocast too
		if f < oneHot+softmax {
			t.Errorf("amp %v: forward peak %d, below the one_hot and the softmaxes, %d", amp, f, oneHot+softmax)
		}
		if grads := 2 * int64(B*C*A) * es; b < grads {
			t.Errorf("amp %v: backward peak %d, below the two gradients, %d", amp, b, grads)
		}
		if PeakBytes(in) != max(f, b) {
			t.Errorf("amp %v: PeakBytes is %d, want %d", amp, PeakBytes(in), max(f, b))
		}
		// The recording tape sees the same forward peak.
		r := newTape(t)
		NewYOLOv9().Forward(r, in)
		if r.peak != f {
			t.Errorf("amp %v: Peaks says %d in the forward, the tape %d", amp, f, r.peak)
		}
	}
}

func TestForegroundAnchors(t *testing.T) {
	l := NewYOLOv9()
	for _, c := range []struct{ b, m, a, want int64 }{{64, 16, 8400, 64 * 160}, {64, 128, 8400, 64 * 1280}, {2, 1000, 8400, 2 * 8400}, {3, 0, 8400, 0}} {
		if got := l.ForegroundAnchors(c.b, c.m, c.a); got != c.want {
			t.Errorf("ForegroundAnchors(%d, %d, %d) = %d, want %d", c.b, c.m, c.a, got, c.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, in := range []Input{
		{Batch: 0, Maps: [][][3]int64{yolov9s}, DType: ir.Float32},
		{Batch: 2, DType: ir.Float32},
		{Batch: 2, Maps: [][][3]int64{{{64, 20, 20}}}, DType: ir.Float32},
		{Batch: 2, Maps: [][][3]int64{yolov9s}, DType: ir.Int64},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for %+v", in)
				}
			}()
			NewYOLOv9().Forward(newTape(t), in)
		}()
	}
}

// The loss's own peaks for yolov9-s's maps at batch 64 and 640.
func ExampleYOLOv9_Peaks() {
	l := NewYOLOv9()
	for _, amp := range []bool{false, true} {
		for _, boxes := range []int64{16, 128} {
			dt := ir.Float32
			if amp {
				dt = ir.Float16
			}
			in := Input{Batch: 64, Maps: [][][3]int64{yolov9s, yolov9s}, DType: dt, AMP: amp, Boxes: boxes}
			f, b := l.Peaks(in)
			fmt.Printf("amp %-5v boxes %3d: forward %.3f GB, backward %.3f GB\n", amp, boxes, float64(f)/1e9, float64(b)/1e9)
		}
	}
	// Output:
	// amp false boxes  16: forward 2.308 GB, backward 1.772 GB
	// amp false boxes 128: forward 8.436 GB, backward 1.830 GB
	// amp true  boxes  16: forward 2.083 GB, backward 1.626 GB
	// amp true  boxes 128: forward 8.032 GB, backward 1.626 GB
}

// TestCounts checks per-image box counts: equal counts are the same loss as
// Boxes; mixed counts pad the assigner to the largest, so they need more
// than every image at the smallest count and less than every image at the
// largest, and a batch's targets and foreground grow with each count.
func TestCounts(t *testing.T) {
	l := NewYOLOv9()
	for _, amp := range []bool{false, true} {
		same := input(4, 9, amp)
		same.Counts = []int64{9, 9, 9, 9}
		if f, b := l.Peaks(same); [2]int64{f, b} != func() [2]int64 { f, b := l.Peaks(input(4, 9, amp)); return [2]int64{f, b} }() {
			t.Errorf("amp %v: equal counts differ from Boxes 9", amp)
		}
		mixed := input(4, 0, amp)
		mixed.Counts = []int64{0, 3, 30, 7}
		mf, mb := l.Peaks(mixed)
		lo, _ := l.Peaks(input(4, 0, amp))
		hf, hb := l.Peaks(input(4, 30, amp))
		if !(mf > lo && mf < hf && mb <= hb) {
			t.Errorf("amp %v: counts 0, 3, 30, 7 peak at %d/%d; want between %d and %d/%d", amp, mf, mb, lo, hf, hb)
		}
		more := mixed
		more.Counts = []int64{0, 3, 30, 8}
		if f, b := l.Peaks(more); f < mf || b < mb || f+b == mf+mb {
			t.Errorf("amp %v: one more box (%d/%d) does not grow the loss (%d/%d)", amp, f, b, mf, mb)
		}
	}
}

// TestValidation checks val.py's loss of a validation batch: under
// inference mode every tensor it allocates is freed before it returns, it
// makes no copy of the targets, and it never holds more at once than the
// training loss's forward, which autograd makes keep its saved tensors.
func TestValidation(t *testing.T) {
	for _, half := range []bool{false, true} {
		for _, boxes := range []int64{0, 7} {
			in := input(8, boxes, false)
			in.Maps = in.Maps[:1] // train.py's single head
			if half {
				in.DType = ir.Float16 // the half model of an AMP run, outside autocast
			}
			in.Validation = true
			tp := newTape(t)
			l := NewYOLOv9()
			if saved := l.Forward(tp, in); len(saved) != 0 {
				t.Errorf("half %v, %d boxes: %d saved buffers, want none", half, boxes, len(saved))
			}
			if len(tp.live) != 0 {
				t.Errorf("half %v, %d boxes: %d buffers alive after the validation loss", half, boxes, len(tp.live))
			}
			for _, w := range tp.what {
				if strings.Contains(w, "targets.to(device)") {
					t.Errorf("half %v, %d boxes: the validation loss copies the targets", half, boxes)
				}
			}
			train := in
			train.Validation = false
			tr := newTape(t)
			l.Forward(tr, train)
			if tp.peak > tr.peak {
				t.Errorf("half %v, %d boxes: validation loss peaks at %d, above the training forward's %d", half, boxes, tp.peak, tr.peak)
			}
		}
	}
}

// PeakBytes returns the larger of the two peaks of NewYOLOv9().Peaks: a
// quick figure for what the loss adds on top of the network.
func PeakBytes(in Input) int64 {
	f, b := NewYOLOv9().Peaks(in)
	return max(f, b)
}
