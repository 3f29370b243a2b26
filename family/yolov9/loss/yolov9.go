package loss

import (
	"fmt"
	"slices"
	"sort"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// YOLOv9 models ComputeLoss of utils/loss_tal_dual.py, the dual task-aligned
// loss that train_dual.py computes under torch.cuda.amp.autocast(amp) right
// after the forward. Its Forward and Backward record schedule.Tape
// fragments; package yolov9 adapts them to schedule.Loss. The zero value is
// not ready: use NewYOLOv9.
type YOLOv9 struct {
	// TopK is the assigner's topk, the number of candidate anchors each
	// ground-truth box keeps (the YOLOM environment variable, 10 by
	// default).
	TopK int64
	// RegMax is the number of DFL bins per box side (the Detect head's
	// reg_max, 16). The first 4·RegMax channels of a map are the box
	// distributions; the rest are the class logits.
	RegMax int64
}

// NewYOLOv9 returns the loss with the settings train_dual.py uses: topk 10
// and 16 DFL bins.
func NewYOLOv9() *YOLOv9 { return &YOLOv9{TopK: 10, RegMax: 16} }

// Input describes the head's outputs and the targets.
type Input struct {
	// Batch is the batch size.
	Batch int64
	// Maps are the head's output maps, branch by branch (the dual head has
	// two), each level's dims [C, H, W] (C = 4·reg_max + classes).
	Maps [][][3]int64
	// DType is the maps' element type: float32, or float16 under AMP.
	DType ir.DType
	// AMP says the loss runs under torch.autocast, as train_dual.py
	// computes it.
	AMP bool
	// Boxes is the number of ground-truth boxes in every image.
	Boxes int64
	// Counts, when not nil, are the boxes of each image (Batch of them),
	// and Boxes is ignored: preprocess pads every image's targets to the
	// largest count, so the assigner's [B, M, A] tensors have M =
	// max(Counts), while the targets copy holds sum(Counts) rows and an
	// image keeps min(A, count·topk) foreground anchors.
	Counts []int64
	// Validation is val.py's compute_loss(train_out, targets) of each
	// validation batch: under inference mode, so no autograd node keeps
	// anything and Forward frees all it allocates, with the targets
	// already on the device (no copy). Backward does not apply.
	Validation bool
}

// Forward records ComputeLoss.__call__ (with the targets.to(device) copy
// that train_dual.py passes it) and returns what autograd keeps for the
// loss's backward, in allocation order.
func (l *YOLOv9) Forward(t schedule.Tape, in Input) []schedule.Buf {
	p := l.build(in)
	bufs := make(map[tensor]schedule.Buf)
	p.run(t, p.ev[:p.split], bufs)
	ids := p.savedAt()
	saved := make([]schedule.Buf, len(ids))
	for i, id := range ids {
		saved[i] = bufs[id]
	}
	return saved
}

// Backward records the loss's backward: the autograd nodes of the loss run
// in reverse creation order, free what they saved and leave, per branch,
// the [B, C, A] gradient of the branch's maps (the backward of the
// torch.cat/split at the top of __call__), which it returns. saved must be
// what Forward returned for the same input.
func (l *YOLOv9) Backward(t schedule.Tape, in Input, saved []schedule.Buf) []schedule.Buf {
	if in.Validation {
		panic("loss: Backward of a validation loss, which autograd does not record")
	}
	p := l.build(in)
	ids := p.savedAt()
	if len(ids) != len(saved) {
		panic(fmt.Sprintf("loss: Backward got %d saved buffers, Forward returns %d for this input", len(saved), len(ids)))
	}
	bufs := make(map[tensor]schedule.Buf, len(ids))
	for i, id := range ids {
		bufs[id] = saved[i]
	}
	p.run(t, p.ev[p.split:], bufs)
	grads := make([]schedule.Buf, len(p.grads))
	for i, g := range p.grads {
		grads[i] = bufs[g]
	}
	return grads
}

// Allocation is one allocation the model makes.
type Allocation struct {
	// Name says what the tensor is, such as "b1 assigner bbox_scores";
	// "b1" and "b2" are the two branches.
	Name string
	// Shape and DType describe the tensor; Bytes is what it requests.
	Shape []int64
	DType string
	Bytes int64
	// Backward says the loss's backward allocates it.
	Backward bool
	// Saved says autograd keeps it from the forward to the backward.
	Saved bool
}

// Allocations lists, in order, every allocation that Forward and Backward
// record for in.
func (l *YOLOv9) Allocations(in Input) []Allocation {
	p := l.build(in)
	saved := make(map[tensor]bool)
	for _, id := range p.savedAt() {
		saved[id] = true
	}
	var out []Allocation
	for i, e := range p.ev {
		if !e.alloc {
			continue
		}
		r := p.recs[e.t]
		out = append(out, Allocation{
			Name: r.name, Shape: r.shape, DType: r.dt.name, Bytes: r.bytes,
			Backward: i >= p.split, Saved: saved[e.t],
		})
	}
	return out
}

// Peaks returns the most bytes the loss alone holds at once in its forward
// (the targets copy, the loss's tensors and what it saves) and in its
// backward (what the forward saved, the backward's temporaries and the
// gradients it returns). Nothing of the network is counted.
func (l *YOLOv9) Peaks(in Input) (forward, backward int64) {
	p := l.build(in)
	var live int64
	for i, e := range p.ev {
		if i == p.split {
			backward = live
		}
		if e.alloc {
			live += p.recs[e.t].bytes
		} else {
			live -= p.recs[e.t].bytes
		}
		if i < p.split {
			forward = max(forward, live)
		} else {
			backward = max(backward, live)
		}
	}
	return forward, backward
}

// ForegroundAnchors returns the number of foreground anchors of a branch
// with a anchors per image that the model assumes: every ground-truth box
// keeps its topk candidates, candidates of different boxes do not collide,
// and an image cannot have more foreground anchors than anchors, so
// batch·min(a, boxes·topk). It is a model of the count, not a fit.
func (l *YOLOv9) ForegroundAnchors(batch, boxes, a int64) int64 {
	return batch * min(a, boxes*l.TopK)
}

// CountShape returns the class of in's box counts and the numbers that the
// loss's tensors grow with: at one batch and one set of maps, inputs of one
// class give the same allocations and frees, each of bytes affine in the
// numbers. The class says whether the most boxes of an image is 0, 1 or
// more and, by branch, whether it has foreground anchors (which decide
// which tensors exist); the numbers are that largest count (the assigner's
// [B, M, A] tensors), the batch's boxes (the targets' rows) and each
// branch's foreground anchors.
func (l *YOLOv9) CountShape(in Input) (class string, params []int64) {
	s := l.shape(in)
	class = fmt.Sprintf("M%d", min(s.M, 2))
	params = []int64{s.M, s.total}
	for _, b := range s.br {
		class += fmt.Sprintf(" F%d", min(b.F, 1))
		params = append(params, b.F)
	}
	return class, params
}

// dtype is a tensor element type.
type dtype struct {
	name string
	size int64
}

var (
	f32   = dtype{"float32", 4}
	f16   = dtype{"float16", 2}
	i64   = dtype{"int64", 8}
	boolT = dtype{"bool", 1}
)

// promote returns the type of a binary op on floating tensors of types a and
// b (the wider one).
func promote(a, b dtype) dtype {
	if b.size > a.size {
		return b
	}
	return a
}

// tensor indexes a prog's records; none stands for a tensor of no bytes.
type tensor int32

const none tensor = -1

type record struct {
	name  string
	shape []int64
	dt    dtype
	bytes int64
	refs  int
}

type event struct {
	t     tensor
	alloc bool
}

// prog is the loss's allocate/free program. A tensor holds a count of
// references: its owner (a Python name, a temporary or a C++ local) and
// every autograd node that saves it; it is freed when the last goes.
type prog struct {
	recs  []record
	ev    []event
	split int      // index of the first backward event
	grads []tensor // the maps' gradients, by branch
	tag   string   // prefixed to names, such as "b1 "
	// noGrad: autograd is off, so no node saves a tensor (keep does
	// nothing) and there is no backward.
	noGrad bool
}

func (p *prog) alloc(name string, dt dtype, shape ...int64) tensor {
	n := dt.size
	for _, d := range shape {
		n *= d
	}
	if n <= 0 {
		return none
	}
	t := tensor(len(p.recs))
	p.recs = append(p.recs, record{name: p.tag + name, shape: append([]int64(nil), shape...), dt: dt, bytes: n, refs: 1})
	p.ev = append(p.ev, event{t: t, alloc: true})
	return t
}

// keep adds a reference: an autograd node saves the tensor, or a view of it.
// With autograd off it does nothing.
func (p *prog) keep(ts ...tensor) {
	if p.noGrad {
		return
	}
	for _, t := range ts {
		if t != none {
			p.recs[t].refs++
		}
	}
}

// drop removes a reference and frees the tensor with its last one.
func (p *prog) drop(ts ...tensor) {
	for _, t := range ts {
		if t == none {
			continue
		}
		r := &p.recs[t]
		if r.refs <= 0 {
			panic("loss: internal error: " + r.name + " dropped after it was freed")
		}
		r.refs--
		if r.refs == 0 {
			p.ev = append(p.ev, event{t: t})
		}
	}
}

func (p *prog) dt(t tensor) dtype {
	if t == none {
		return f32
	}
	return p.recs[t].dt
}

// savedAt returns the tensors alive between the forward and the backward,
// in allocation order.
func (p *prog) savedAt() []tensor {
	live := make(map[tensor]bool)
	for _, e := range p.ev[:p.split] {
		if e.alloc {
			live[e.t] = true
		} else {
			delete(live, e.t)
		}
	}
	ids := make([]tensor, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (p *prog) run(t schedule.Tape, evs []event, bufs map[tensor]schedule.Buf) {
	for _, e := range evs {
		if e.alloc {
			r := p.recs[e.t]
			bufs[e.t] = t.Alloc(r.bytes, fmt.Sprintf("loss %s %v %s", r.name, r.shape, r.dt.name))
			continue
		}
		b, ok := bufs[e.t]
		if !ok {
			panic("loss: internal error: free of " + p.recs[e.t].name + " before its allocation")
		}
		t.Free(b)
		delete(bufs, e.t)
	}
}

// shape is what build derives from an Input.
type shape struct {
	B, M, K, reg int64
	total        int64 // the boxes of the batch: the targets' rows
	dt           dtype // the maps' type
	amp          bool  // autocast is on
	lowp         bool  // autocast casts the maps' type to float32 for its fp32 ops
	br           []branchShape
}

type branchShape struct {
	C, A, nc int64
	levels   [][3]int64
	F        int64 // foreground anchors over the batch
}

func (l *YOLOv9) shape(in Input) shape {
	if l.TopK < 1 || l.RegMax < 1 {
		panic(fmt.Sprintf("loss: TopK %d and RegMax %d must be positive (use NewYOLOv9)", l.TopK, l.RegMax))
	}
	if in.Batch < 1 || len(in.Maps) == 0 || in.Boxes < 0 {
		panic(fmt.Sprintf("loss: batch %d, %d branches and %d boxes per image: want a positive batch, a branch and no negative box count", in.Batch, len(in.Maps), in.Boxes))
	}
	s := shape{B: in.Batch, M: in.Boxes, K: l.TopK, reg: l.RegMax, amp: in.AMP, total: in.Batch * in.Boxes}
	if in.Counts != nil {
		if int64(len(in.Counts)) != in.Batch {
			panic(fmt.Sprintf("loss: %d box counts for a batch of %d", len(in.Counts), in.Batch))
		}
		s.M, s.total = 0, 0
		for _, c := range in.Counts {
			if c < 0 {
				panic(fmt.Sprintf("loss: a box count of %d", c))
			}
			s.M, s.total = max(s.M, c), s.total+c
		}
	}
	switch in.DType {
	case ir.Float32:
		s.dt = f32
	case ir.Float16, ir.BFloat16:
		s.dt = dtype{in.DType.String(), 2}
	default:
		panic(fmt.Sprintf("loss: maps of type %v: want float32, float16 or bfloat16", in.DType))
	}
	s.lowp = s.amp && s.dt.size == 2
	for _, maps := range in.Maps {
		if len(maps) == 0 {
			panic("loss: a branch without maps")
		}
		b := branchShape{C: maps[0][0], levels: maps}
		for _, m := range maps {
			if m[0] != b.C {
				panic(fmt.Sprintf("loss: a branch's maps have %d and %d channels", b.C, m[0]))
			}
			b.A += m[1] * m[2]
		}
		b.nc = b.C - 4*s.reg
		if b.nc < 1 || b.A < 1 {
			panic(fmt.Sprintf("loss: maps of %d channels and %d anchors leave %d classes after %d box channels", b.C, b.A, b.nc, 4*s.reg))
		}
		switch {
		case in.Counts != nil:
			for _, c := range in.Counts {
				b.F += l.ForegroundAnchors(1, c, b.A)
			}
		case s.M > 0:
			b.F = l.ForegroundAnchors(s.B, s.M, b.A)
		}
		s.br = append(s.br, b)
	}
	return s
}

// build emits the whole program: the forward of ComputeLoss.__call__, then
// (from p.split) the backward of what it recorded.
func (l *YOLOv9) build(in Input) *prog {
	s := l.shape(in)
	p := &prog{noGrad: in.Validation}
	B, M, reg, dt := s.B, s.M, s.reg, s.dt
	nb := len(s.br)
	tag := func(b int) string { return fmt.Sprintf("b%d ", b+1) }

	// train_dual.py: compute_loss(pred, targets.to(device)); the copy lives
	// until the call returns. targets is [image, class, x, y, w, h]. In
	// validation they are on the device already, and .to is the identity.
	var tgt tensor = none
	if !in.Validation {
		tgt = p.alloc("targets.to(device)", f32, s.total, 6)
	}

	// torch.cat([xi.view(B, no, -1) for xi in feats], 2).split((4·reg, nc), 1),
	// then .permute(0, 2, 1).contiguous() of the scores and of the
	// distributions. The cat dies with the last view of it; cat, split and
	// permute save nothing, contiguous (clone) neither.
	S := make([]tensor, nb) // pred_scores [B, A, nc]
	D := make([]tensor, nb) // pred_distri [B, A, 4·reg]
	for b, br := range s.br {
		p.tag = tag(b)
		x := p.alloc("torch.cat(maps)", dt, B, br.C, br.A)
		S[b] = p.alloc("pred_scores.contiguous()", dt, B, br.A, br.nc)
		D[b] = p.alloc("pred_distri.contiguous()", dt, B, br.A, 4*reg)
		p.drop(x)
	}
	p.tag = ""

	// make_anchors(feats, stride, 0.5), in the maps' type: per level an
	// arange plus the offset for x and y, stack → [h·w, 2], full → [h·w, 1];
	// then the two cats. The per-level lists go at return.
	var stacks, fulls []tensor
	var sx, sy tensor = none, none
	A0 := s.br[0].A
	for _, lv := range s.br[0].levels {
		h, w := lv[1], lv[2]
		ar := p.alloc("make_anchors arange(w)", dt, w)
		nx := p.alloc("make_anchors sx", dt, w)
		p.drop(ar, sx)
		sx = nx
		ar = p.alloc("make_anchors arange(h)", dt, h)
		ny := p.alloc("make_anchors sy", dt, h)
		p.drop(ar, sy)
		sy = ny
		stacks = append(stacks, p.alloc("make_anchors stack", dt, h*w, 2))
		fulls = append(fulls, p.alloc("make_anchors full(stride)", dt, h*w, 1))
	}
	anchor := p.alloc("anchor_points", dt, A0, 2)
	stride := p.alloc("stride_tensor", dt, A0, 1)
	// A list frees its items last first.
	slices.Reverse(stacks)
	slices.Reverse(fulls)
	p.drop(stacks...)
	p.drop(fulls...)
	p.drop(sx, sy)

	// preprocess: zeros(B, M, 5) filled image by image (the per-image
	// boolean-index temporaries of M·5 floats are left out), then
	// out[..., 1:5] = xywh2xyxy(out[..., 1:5].mul_(scale)): a clone and, per
	// coordinate, x[..., 2] / 2 and x[..., 0] - that.
	out := p.alloc("preprocess targets zeros", f32, B, M, 5)
	if M > 0 {
		y := p.alloc("xywh2xyxy clone", f32, B, M, 4)
		for range 4 {
			h := p.alloc("xywh2xyxy half side", f32, B, M)
			c := p.alloc("xywh2xyxy corner", f32, B, M)
			p.drop(h, c)
		}
		p.drop(y)
	}
	// gt_labels, gt_bboxes = targets.split((1, 4), 2) are views;
	// mask_gt = gt_bboxes.sum(2, keepdim=True).gt_(0).
	maskGT := p.alloc("mask_gt", f32, B, M, 1)

	// bbox_decode for each branch: view → softmax(3) (autocast
	// fp32_set_opt_dtype: float32 out, saved by SoftmaxBackward) →
	// matmul(proj) (autocast lower precision: a float16 copy of the softmax,
	// folded to mv, which saves only proj) → dist2bbox: anchor - lt,
	// anchor + rb, cat.
	sm := make([]tensor, nb)
	pb := make([]tensor, nb) // pred_bboxes [B, A, 4]
	smDT, mvDT := dt, dt
	if s.amp {
		smDT, mvDT = f32, f16
		if dt.name == "bfloat16" {
			mvDT = dt
		}
	}
	pbDT := promote(dt, mvDT)
	for b, br := range s.br {
		p.tag = tag(b)
		var conv tensor = none
		if s.amp && dt.name == "bfloat16" {
			// softmax(x, dtype=float32) converts bfloat16 first; only
			// float16 has the fused half_to_float kernel.
			conv = p.alloc("bbox_decode softmax input to float32", f32, B, br.A, 4, reg)
		}
		sm[b] = p.alloc("bbox_decode softmax", smDT, B, br.A, 4, reg)
		p.keep(sm[b])
		p.drop(conv)
		var cast tensor = none
		if smDT != mvDT {
			cast = p.alloc("bbox_decode softmax autocast copy", mvDT, B, br.A, 4, reg)
		}
		mv := p.alloc("bbox_decode matmul(proj)", mvDT, B, br.A, 4)
		p.drop(cast, sm[b])
		x1 := p.alloc("dist2bbox x1y1", pbDT, B, br.A, 2)
		x2 := p.alloc("dist2bbox x2y2", pbDT, B, br.A, 2)
		pb[b] = p.alloc("pred_bboxes", pbDT, B, br.A, 4)
		p.drop(x1, x2, mv)
	}

	// The assigners, under torch.no_grad(): their arguments are evaluated
	// first and live for the call.
	type targets struct{ labels, bboxes, scores, fg tensor }
	tg := make([]targets, nb)
	for b, br := range s.br {
		p.tag = tag(b)
		ps := p.alloc("assigner pd_scores (sigmoid)", dt, B, br.A, br.nc)
		pd := p.alloc("assigner pd_bboxes (pred_bboxes·stride)", pbDT, B, br.A, 4)
		if pbDT != f32 {
			pd32 := p.alloc("assigner pd_bboxes .type(float32)", f32, B, br.A, 4)
			p.drop(pd)
			pd = pd32
		}
		ac := p.alloc("assigner anc_points (anchor·stride)", dt, br.A, 2)
		tl, tb, ts, fg := l.assign(p, s, br, ps)
		tg[b] = targets{tl, tb, ts, fg}
		p.drop(ps, pd, ac)
	}
	// target_bboxes /= stride_tensor is in place; target_scores.sum() is a
	// scalar.

	// Class loss: BCEWithLogitsLoss(pos_weight, reduction='none')(
	// pred_scores, target_scores.to(dtype)).sum(). Autocast runs
	// binary_cross_entropy_with_logits in float32 (casting both); its
	// derivative saves input and target. Forward (Loss.cpp): log_sigmoid,
	// (pos_weight - 1)·target + 1, (1 - target)·input - log_sigmoid·weight.
	bceIn := make([]tensor, nb)
	bceTg := make([]tensor, nb)
	ceDT := dt
	if s.lowp {
		ceDT = f32
	}
	for b, br := range s.br {
		p.tag = tag(b)
		K := []int64{B, br.A, br.nc}
		target := tg[b].scores
		var conv tensor = none
		if p.dt(target) != dt {
			conv = p.alloc("cls target_scores.to(dtype)", dt, K...)
			target = conv
		}
		input := S[b]
		var in32, tg32 tensor = none, none
		if s.lowp {
			in32 = p.alloc("cls BCE autocast input float32", f32, K...)
			tg32 = p.alloc("cls BCE autocast target float32", f32, K...)
			input, target = in32, tg32
		}
		ls := p.alloc("cls BCE log_sigmoid", ceDT, K...)
		lw := p.alloc("cls BCE log_weight", ceDT, K...)
		p.drop(lw)
		lo := p.alloc("cls BCE loss", ceDT, K...)
		p.drop(ls)
		p.keep(input, target)
		bceIn[b], bceTg[b] = input, target
		p.drop(in32, tg32, conv)
		p.drop(lo) // .sum() saves nothing of it
	}

	// Box loss (BboxLoss.forward) on the foreground anchors, after
	// `if fg_mask.sum():`, whose sum of a bool tensor reads an int64 copy.
	bl := make([]bboxLoss, nb)
	for b, br := range s.br {
		p.tag = tag(b)
		bl[b].iou = none
		p.drop(p.alloc("fg_mask.sum() int64 copy", i64, B, br.A))
		if br.F > 0 {
			bl[b] = l.bboxForward(p, s, br, D[b], pb[b])
		}
	}
	p.tag = ""

	// __call__ returns: its locals go in the order Python cleared them,
	// then train_dual.py drops the targets copy.
	for b := range s.br {
		p.drop(D[b], S[b])
	}
	p.drop(anchor, stride, out, maskGT)
	for b, br := range s.br {
		p.drop(pb[b])
		if br.F == 0 && !p.noGrad {
			// Without a box loss nothing reaches bbox_decode's graph:
			// it dies with pred_bboxes and frees the softmax.
			p.drop(sm[b])
		}
	}
	for b := range s.br {
		p.drop(tg[b].labels, tg[b].bboxes, tg[b].scores, tg[b].fg)
	}
	for b := range s.br {
		p.drop(bl[b].iou)
	}
	p.drop(tgt)
	p.split = len(p.ev)
	if p.noGrad {
		return p
	}

	// Backward, in reverse creation order: the box losses (last branch
	// first), the class losses, the decodes, then each branch's
	// contiguous/permute/split/cat.
	zD := make([]tensor, nb)
	zPB := make([]tensor, nb)
	for i := range zD {
		zD[i], zPB[i] = none, none
	}
	for b := nb - 1; b >= 0; b-- {
		p.tag = tag(b)
		if s.br[b].F > 0 {
			zD[b], zPB[b] = l.bboxBackward(p, s, s.br[b], bl[b], D[b], pb[b])
		}
	}
	gS := make([]tensor, nb)
	for b := nb - 1; b >= 0; b-- {
		p.tag = tag(b)
		K := []int64{B, s.br[b].A, s.br[b].nc}
		// binary_cross_entropy_with_logits_backward (FunctionsManual.cpp),
		// grad mode off: t = pos_weight·target;
		// t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t).mul_(grad).
		t := p.alloc("cls BCE backward pos_weight·target", ceDT, K...)
		g := p.alloc("cls BCE backward grad", ceDT, K...)
		sg := p.alloc("cls BCE backward sigmoid", ceDT, K...)
		p.drop(sg, t)
		p.drop(bceIn[b], bceTg[b])
		if ceDT != dt {
			g16 := p.alloc("cls grad autocast copy back", dt, K...)
			p.drop(g)
			g = g16
		}
		gS[b] = g
	}
	for b := nb - 1; b >= 0; b-- {
		p.tag = tag(b)
		br := s.br[b]
		if br.F == 0 {
			continue
		}
		// dist2bbox: cat → narrow views; add passes rb's gradient; sub
		// negates lt's; split's backward cats them.
		neg := p.alloc("dist2bbox backward -grad(lt)", pbDT, B, br.A, 2)
		sc := p.alloc("dist2bbox backward split cat", pbDT, B, br.A, 4)
		p.drop(neg, zPB[b])
		// mv: grad.ger(proj).
		gr := p.alloc("bbox_decode backward mv grad.ger(proj)", mvDT, B, br.A, 4, reg)
		p.drop(sc)
		if smDT != mvDT {
			gc := p.alloc("bbox_decode backward autocast copy back", smDT, B, br.A, 4, reg)
			p.drop(gr)
			gr = gc
		}
		// _softmax_backward_data on CUDA first multiplies grad by the
		// output into a temporary of grad's type.
		gs := p.alloc("bbox_decode backward softmax", dt, B, br.A, 4, reg)
		p.drop(p.alloc("bbox_decode backward softmax grad·output", smDT, B, br.A, 4, reg))
		p.drop(gr, sm[b])
		// Summed in place into pred_distri's gradient from the DFL.
		p.drop(gs)
	}
	for b := nb - 1; b >= 0; b-- {
		p.tag = tag(b)
		br := s.br[b]
		// split_with_sizes backward: zeros for a piece without gradient,
		// then cat along the channels.
		var zero tensor = none
		if zD[b] == none {
			zero = p.alloc("split backward zeros(pred_distri)", dt, B, 4*reg, br.A)
		}
		g := p.alloc("grad of the maps (split backward cat)", dt, B, br.C, br.A)
		p.drop(zero, zD[b], gS[b])
		p.grads = append(p.grads, g)
	}
	p.tag = ""
	// The grads go back to the caller in branch order.
	for i, j := 0, len(p.grads)-1; i < j; i, j = i+1, j-1 {
		p.grads[i], p.grads[j] = p.grads[j], p.grads[i]
	}
	return p
}

// assign emits TaskAlignedAssigner.forward (utils/tal/assigner.py) under
// torch.no_grad() and returns target_labels [B, A] int64, target_bboxes
// [B, A, 4] float32, target_scores [B, A, nc] float32 and fg_mask [B, A]
// bool. ps is pd_scores; gt_labels, gt_bboxes and mask_gt are views or
// tensors that outlive the call.
func (l *YOLOv9) assign(p *prog, s shape, br branchShape, ps tensor) (tl, tb, ts, fb tensor) {
	B, M, A, nc, K := s.B, s.M, br.A, br.nc, s.K
	if M == 0 {
		// n_max_boxes == 0: full_like / zeros_like of the predictions.
		tl = p.alloc("assigner target_labels full_like", s.dt, B, A)
		tb = p.alloc("assigner target_bboxes zeros_like", f32, B, A, 4)
		ts = p.alloc("assigner target_scores zeros_like", s.dt, B, A, nc)
		fb = p.alloc("assigner fg_mask zeros_like", s.dt, B, A)
		return
	}

	// get_box_metrics.
	gl := p.alloc("assigner gt_labels.long()", i64, B, M, 1)
	i0 := p.alloc("assigner ind[0] to device", i64, B, M)
	i1 := p.alloc("assigner ind[1] to device", i64, B, M)
	scores := p.alloc("assigner bbox_scores", s.dt, B, M, A)
	p.drop(i0, i1)
	res, _ := p.ciou("assigner bbox_iou", []int64{B, M, 1, 1}, f32, []int64{B, 1, A, 1}, f32, []int64{B, M, A, 1}, false, none, none)
	ov := p.alloc("assigner overlaps (clamp)", f32, B, M, A)
	p.drop(res)
	var pa tensor
	paDT := s.dt
	if s.lowp {
		// pow is an autocast fp32 op.
		c := p.alloc("assigner bbox_scores autocast float32", f32, B, M, A)
		pa = p.alloc("assigner bbox_scores.pow(alpha)", f32, B, M, A)
		p.drop(c)
		paDT = f32
	} else {
		pa = p.alloc("assigner bbox_scores.pow(alpha)", paDT, B, M, A)
	}
	pw := p.alloc("assigner overlaps.pow(beta)", f32, B, M, A)
	am := p.alloc("assigner align_metric", promote(paDT, f32), B, M, A)
	p.drop(pa, pw)
	p.drop(gl, scores)

	// select_candidates_in_gts: [B·M, A, 2] deltas each way, cat, amin.
	d1 := p.alloc("assigner in_gts xy - lt", f32, B*M, A, 2)
	d2 := p.alloc("assigner in_gts rb - xy", f32, B*M, A, 2)
	cat := p.alloc("assigner in_gts bbox_deltas", f32, B*M, A, 4)
	p.drop(d1, d2)
	inGT := p.alloc("assigner mask_in_gts", f32, B, M, A)
	p.drop(cat)

	// select_topk_candidates(align_metric * mask_in_gts,
	// topk_mask=mask_gt.repeat([1, 1, topk]).bool()).
	metrics := p.alloc("assigner align_metric·mask_in_gts", f32, B, M, A)
	rep := p.alloc("assigner topk_mask repeat", f32, B, M, K)
	tmask := p.alloc("assigner topk_mask", boolT, B, M, K)
	p.drop(rep)
	tv := p.alloc("assigner topk values", f32, B, M, K)
	ti := p.alloc("assigner topk indices", i64, B, M, K)
	ti2 := p.alloc("assigner topk_idxs where", i64, B, M, K)
	p.drop(ti)
	oh := p.alloc("assigner one_hot(topk_idxs)", i64, B, M, K, A)
	sum := p.alloc("assigner is_in_topk sum", i64, B, M, A)
	p.drop(oh)
	gt1 := p.alloc("assigner is_in_topk > 1", boolT, B, M, A)
	wh := p.alloc("assigner is_in_topk where", i64, B, M, A)
	p.drop(gt1, sum)
	topk := p.alloc("assigner mask_topk", f32, B, M, A)
	// The callee's frame owns the arguments (CPython moves them into it)
	// and clears them before its locals.
	p.drop(metrics, tmask)
	p.drop(tv, ti2, wh)
	m1 := p.alloc("assigner mask_topk·mask_in_gts", f32, B, M, A)
	mp := p.alloc("assigner mask_pos", f32, B, M, A)
	p.drop(m1)
	p.drop(inGT, topk)

	// select_highest_overlaps. With more than one box per image some
	// anchor is a candidate of two boxes (fg_mask.max() > 1) and the
	// branch that resolves it runs.
	fg := p.alloc("assigner fg_mask", f32, B, A)
	var multi, mo, imo tensor = none, none, none
	mp2 := none
	if M > 1 {
		c := p.alloc("assigner fg_mask > 1", boolT, B, 1, A)
		multi = p.alloc("assigner mask_multi_gts", boolT, B, M, A)
		p.drop(c)
		mo = p.alloc("assigner overlaps.argmax(1)", i64, B, A)
		ohm := p.alloc("assigner one_hot(max_overlaps_idx)", i64, B, A, M)
		imo = p.alloc("assigner is_max_overlaps", f32, B, M, A)
		p.drop(ohm)
		mp2 = p.alloc("assigner mask_pos where", f32, B, M, A)
		fg2 := p.alloc("assigner fg_mask", f32, B, A)
		p.drop(fg)
		fg = fg2
	}
	tgi := p.alloc("assigner target_gt_idx", i64, B, A)
	p.drop(multi, mo, imo)
	if mp2 != none {
		p.drop(mp)
		mp = mp2
	}

	// get_targets.
	bi := p.alloc("assigner batch_ind", i64, B, 1)
	bm := p.alloc("assigner batch_ind·n_max_boxes", i64, B, 1)
	tgi2 := p.alloc("assigner target_gt_idx + offset", i64, B, A)
	p.drop(bm)
	gll := p.alloc("assigner gt_labels.long()", i64, B, M, 1)
	tl = p.alloc("assigner target_labels", i64, B, A)
	p.drop(gll)
	tb = p.alloc("assigner target_bboxes", f32, B, A, 4)
	cl := p.alloc("assigner target_labels.clamp(0)", i64, B, A)
	p.drop(cl)
	toh := p.alloc("assigner one_hot(target_labels)", i64, B, A, nc)
	fsm := p.alloc("assigner fg_scores_mask", f32, B, A, nc)
	c := p.alloc("assigner fg_scores_mask > 0", boolT, B, A, nc)
	tsw := p.alloc("assigner target_scores where", i64, B, A, nc)
	p.drop(c, toh)
	p.drop(tgi2, bi, fsm)

	// Normalization: align_metric *= mask_pos is in place.
	pam := p.alloc("assigner pos_align_metrics", f32, B, M, 1)
	t := p.alloc("assigner overlaps·mask_pos", f32, B, M, A)
	po := p.alloc("assigner pos_overlaps", f32, B, M, 1)
	p.drop(t)
	t1 := p.alloc("assigner align_metric·pos_overlaps", f32, B, M, A)
	t2 := p.alloc("assigner pos_align_metrics + eps", f32, B, M, 1)
	t3 := p.alloc("assigner norm quotient", f32, B, M, A)
	p.drop(t1, t2)
	nam := p.alloc("assigner norm_align_metric", f32, B, A)
	p.drop(t3)
	ts = p.alloc("assigner target_scores", f32, B, A, nc)
	p.drop(tsw)
	fb = p.alloc("assigner fg_mask.bool()", boolT, B, A)
	p.drop(mp, am, ov, tgi, fg, pam, po, nam)
	return tl, tb, ts, fb
}

// ciou emits bbox_iou(box1, box2, xywh=False, CIoU=True) of utils/metrics.py
// as CPython evaluates it: temporaries die as soon as their expression has
// used them, the locals (w1, h1, w2, h2, inter, union, iou, cw, ch, c2,
// rho2, v, alpha) at return. s1, s2 and s are the shapes of a box1 column,
// a box2 column and the broadcast. With grad (the box loss, where box1
// needs a gradient and box2 does not) it also keeps what the autograd nodes
// save per derivatives.yaml, and returns it.
func (p *prog) ciou(name string, s1 []int64, e1 dtype, s2 []int64, e2 dtype, s []int64, grad bool, box1, box2 tensor) (res tensor, saved []tensor) {
	ef := promote(e1, e2)
	save := func(ts ...tensor) {
		if grad {
			p.keep(ts...)
			saved = append(saved, ts...)
		}
	}
	full := func(what string) tensor { return p.alloc(name+" "+what, ef, s...) }
	// minimum and maximum save (views of) both boxes.
	save(box1, box2)

	w1 := p.alloc(name+" w1", e1, s1...)
	t := p.alloc(name+" b1_y2 - b1_y1", e1, s1...)
	h1 := p.alloc(name+" h1", e1, s1...)
	p.drop(t)
	w2 := p.alloc(name+" w2", e2, s2...)
	t = p.alloc(name+" b2_y2 - b2_y1", e2, s2...)
	h2 := p.alloc(name+" h2", e2, s2...)
	p.drop(t)

	// inter = (min(x2) - max(x1)).clamp(0) * (min(y2) - max(y1)).clamp(0)
	t1 := full("min(x2)")
	t2 := full("max(x1)")
	t3 := full("x overlap")
	p.drop(t1, t2)
	t4 := full("x overlap.clamp(0)")
	save(t3)
	p.drop(t3)
	t5 := full("min(y2)")
	t6 := full("max(y1)")
	t7 := full("y overlap")
	p.drop(t5, t6)
	t8 := full("y overlap.clamp(0)")
	save(t7)
	p.drop(t7)
	inter := full("inter")
	save(t4, t8)
	p.drop(t4, t8)

	// union = w1 * h1 + w2 * h2 - inter + eps
	u1 := p.alloc(name+" w1·h1", e1, s1...)
	save(w1, h1)
	u2 := p.alloc(name+" w2·h2", e2, s2...)
	u3 := full("area sum")
	p.drop(u1, u2)
	u4 := full("area sum - inter")
	p.drop(u3)
	union := full("union")
	p.drop(u4)
	iou := full("iou")
	save(inter, union)

	// cw, ch: the enclosing box.
	c1 := full("max(x2)")
	c2 := full("min(x1)")
	cw := full("cw")
	p.drop(c1, c2)
	c1 = full("max(y2)")
	c2 = full("min(y1)")
	ch := full("ch")
	p.drop(c1, c2)
	// c2 = cw ** 2 + ch ** 2 + eps
	q1 := full("cw**2")
	q2 := full("ch**2")
	save(cw, ch)
	q3 := full("cw**2 + ch**2")
	p.drop(q1, q2)
	cc := full("c2")
	p.drop(q3)

	// rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (...y...) ** 2) / 4
	r1 := p.alloc(name+" b2_x1 + b2_x2", e2, s2...)
	r2 := full("rho x partial")
	p.drop(r1)
	r3 := full("rho x")
	p.drop(r2)
	r4 := full("rho x**2")
	save(r3)
	p.drop(r3)
	r5 := p.alloc(name+" b2_y1 + b2_y2", e2, s2...)
	r6 := full("rho y partial")
	p.drop(r5)
	r7 := full("rho y")
	p.drop(r6)
	r8 := full("rho y**2")
	save(r7)
	p.drop(r7)
	r9 := full("rho sum")
	p.drop(r4, r8)
	rho2 := full("rho2")
	p.drop(r9)

	// v = (4 / pi ** 2) * pow(atan(w2 / h2) - atan(w1 / h1), 2)
	a1 := p.alloc(name+" w2/h2", e2, s2...)
	a2 := p.alloc(name+" atan(w2/h2)", e2, s2...)
	p.drop(a1)
	a3 := p.alloc(name+" w1/h1", e1, s1...)
	a4 := p.alloc(name+" atan(w1/h1)", e1, s1...)
	save(a3)
	p.drop(a3)
	d := full("atan difference")
	p.drop(a2, a4)
	pw := full("atan difference**2")
	save(d)
	p.drop(d)
	v := full("v")
	p.drop(pw)

	// with torch.no_grad(): alpha = v / (v - iou + (1 + eps))
	x1 := full("v - iou")
	x2 := full("v - iou + 1")
	p.drop(x1)
	alpha := full("alpha")
	p.drop(x2)

	// return iou - (rho2 / c2 + v * alpha)
	y1 := full("rho2/c2")
	save(rho2, cc)
	y2 := full("v·alpha")
	save(alpha)
	y3 := full("rho2/c2 + v·alpha")
	p.drop(y1, y2)
	res = full("ciou")
	p.drop(y3)
	p.drop(w1, h1, w2, h2, inter, union, iou, cw, ch, cc, rho2, v, alpha)
	return res, saved
}

// bboxLoss holds what a branch's box loss leaves for the backward.
type bboxLoss struct {
	iou                          tensor // returned to __call__ as iou / iou2
	bboxMask, distMask, weight   tensor
	ciouSaved                    []tensor
	lsL, lsR, nllL, nllR, tL, tR tensor // DFL: log_softmax outputs, nll inputs, targets
	wL, wR                       tensor
}

// bboxForward emits BboxLoss.forward with F = br.F foreground anchors.
// Boolean masking goes through nonzero ([n, dims] int64) and an index
// kernel; masked_select saves its input and its mask.
func (l *YOLOv9) bboxForward(p *prog, s shape, br branchShape, D, pb tensor) bboxLoss {
	B, A, F, reg := s.B, br.A, br.F, s.reg
	pbDT := p.dt(pb)
	var r bboxLoss
	r.bboxMask = p.alloc("bbox_mask", boolT, B, A, 4)
	nz := p.alloc("bbox pred nonzero", i64, 4*F, 3)
	ppos := p.alloc("pred_bboxes_pos", pbDT, 4*F)
	p.drop(nz)
	p.keep(pb, r.bboxMask)
	nz = p.alloc("bbox target nonzero", i64, 4*F, 3)
	tpos := p.alloc("target_bboxes_pos", f32, 4*F)
	p.drop(nz)
	sum := p.alloc("target_scores.sum(-1)", f32, B, A)
	nz = p.alloc("bbox weight nonzero", i64, F, 2)
	r.weight = p.alloc("bbox_weight", f32, F)
	p.drop(nz, sum)
	col := []int64{F, 1}
	r.iou, r.ciouSaved = p.ciou("bbox_iou", col, pbDT, col, f32, col, true, ppos, tpos)
	li := p.alloc("loss_iou 1 - iou", f32, F, 1)
	p.keep(r.weight) // loss_iou *= bbox_weight
	p.drop(li)       // .sum() saves nothing of it

	// DFL.
	r.distMask = p.alloc("dist_mask", boolT, B, A, 4*reg)
	nz = p.alloc("dfl pred nonzero", i64, 4*reg*F, 3)
	pdp := p.alloc("pred_dist_pos", p.dt(D), 4*reg*F)
	p.drop(nz)
	p.keep(D, r.distMask)
	a1 := p.alloc("bbox2dist anchor - x1y1", f32, B, A, 2)
	a2 := p.alloc("bbox2dist x2y2 - anchor", f32, B, A, 2)
	cat := p.alloc("bbox2dist cat", f32, B, A, 4)
	p.drop(a1, a2)
	tlt := p.alloc("target_ltrb (clamp)", f32, B, A, 4)
	p.drop(cat)
	nz = p.alloc("dfl target nonzero", i64, 4*F, 3)
	tlp := p.alloc("target_ltrb_pos", f32, 4*F)
	p.drop(nz)

	// _df_loss.
	r.tL = p.alloc("dfl target_left", i64, F, 4)
	r.tR = p.alloc("dfl target_right", i64, F, 4)
	tf := p.alloc("dfl target_right.float()", f32, F, 4)
	r.wL = p.alloc("dfl weight_left", f32, F, 4)
	p.drop(tf)
	r.wR = p.alloc("dfl weight_right", f32, F, 4)
	nllDT := p.dt(D)
	if s.lowp {
		nllDT = f32
	}
	ce := func(side string, target, weight tensor) (ls, nllIn, loss tensor) {
		// cross_entropy → log_softmax(x, 1, x.dtype) (an explicit dtype,
		// so autocast keeps the maps' type; saved by LogSoftmaxBackward)
		// → nll_loss (autocast fp32: a float32 copy, saved by
		// NllLossBackward with the target).
		ls = p.alloc("dfl log_softmax "+side, p.dt(D), 4*F, reg)
		p.keep(ls)
		nllIn = ls
		var cast tensor = none
		if nllDT != p.dt(D) {
			cast = p.alloc("dfl nll_loss autocast float32 "+side, f32, 4*F, reg)
			nllIn = cast
		}
		p.keep(nllIn, target)
		nl := p.alloc("dfl nll_loss "+side, nllDT, 4*F)
		p.drop(cast, ls)
		loss = p.alloc("dfl loss "+side+"·weight", f32, F, 4)
		p.keep(weight)
		p.drop(nl)
		return ls, nllIn, loss
	}
	var lL, lR tensor
	r.lsL, r.nllL, lL = ce("left", r.tL, r.wL)
	r.lsR, r.nllR, lR = ce("right", r.tR, r.wR)
	sm := p.alloc("dfl loss_left + loss_right", f32, F, 4)
	mean := p.alloc("dfl mean(-1)", f32, F, 1)
	p.drop(sm)
	p.drop(r.tL, r.tR, r.wL, r.wR, lL, lR) // _df_loss returns
	ld := p.alloc("loss_dfl·bbox_weight", f32, F, 1)
	p.keep(r.weight)
	p.drop(mean)
	p.drop(ld)
	// BboxLoss.forward returns.
	p.drop(r.bboxMask, ppos, tpos, r.weight, r.distMask, pdp, tlt, tlp)
	return r
}

// bboxBackward emits the backward of a branch's box loss: the DFL (created
// last) first, then the CIoU part. It returns the gradients of pred_distri
// and pred_bboxes, [B, A, 4·reg] and [B, A, 4].
func (l *YOLOv9) bboxBackward(p *prog, s shape, br branchShape, r bboxLoss, D, pb tensor) (gD, gPB tensor) {
	B, A, F, reg := s.B, br.A, br.F, s.reg
	dDT := p.dt(D)
	nllDT := p.dt(r.nllL)

	// loss_dfl = mean · bbox_weight; mean's backward expands and divides.
	g := p.alloc("dfl backward ·bbox_weight", f32, F, 1)
	p.drop(r.weight)
	gm := p.alloc("dfl backward mean", f32, F, 4)
	p.drop(g)
	side := func(name string, weight, nllIn, target, ls tensor, last bool) tensor {
		// The two sides' Mul nodes share mean's gradient; the second
		// frees it.
		gw := p.alloc("dfl backward ·weight "+name, f32, F, 4)
		if last {
			p.drop(gm)
		}
		p.drop(weight)
		gn := p.alloc("dfl backward nll_loss "+name, nllDT, 4*F, reg)
		p.drop(gw, nllIn, target)
		if nllDT != dDT {
			gc := p.alloc("dfl backward autocast copy back "+name, dDT, 4*F, reg)
			p.drop(gn)
			gn = gc
		}
		gl := p.alloc("dfl backward log_softmax "+name, dDT, 4*F, reg)
		p.drop(gn, ls)
		return gl
	}
	gR := side("right", r.wR, r.nllR, r.tR, r.lsR, false)
	gL := side("left", r.wL, r.nllL, r.tL, r.lsL, true)
	// Both sides reach pred_dist_pos's view node as views (of the
	// log_softmax gradients, which they keep), so the engine's input buffer
	// cannot sum in place: it makes old + new.
	sum := p.alloc("dfl backward gradient sum", dDT, 4*F, reg)
	p.drop(gR, gL)
	// masked_select backward: zeros_like(pred_distri).masked_scatter_(mask,
	// grad), whose CUDA kernel takes an int64 prefix sum of the mask.
	gD = p.alloc("dfl backward masked_select zeros", dDT, B, A, 4*reg)
	ps := p.alloc("dfl backward masked_scatter prefix sum", i64, B, A, 4*reg)
	p.drop(ps, sum)
	// The node's saved variables go in the order codegen declares them:
	// mask_ before self_.
	p.drop(r.distMask, D)

	// loss_iou: ·bbox_weight, 1 - iou, then the CIoU graph over the F
	// boxes. Its tensors are [F, 1]; the walk back is modelled in bulk: a
	// few [F, 1] gradients live at once, then the four column gradients are
	// cat into pred_bboxes_pos's.
	pbDT := p.dt(pb)
	g = p.alloc("bbox backward ·bbox_weight", f32, F, 1)
	p.drop(r.weight)
	gi := p.alloc("bbox backward 1 - iou", f32, F, 1)
	p.drop(g)
	var walk []tensor
	for range 3 {
		walk = append(walk, p.alloc("bbox backward ciou gradient", f32, F, 1))
	}
	var cols []tensor
	for range 4 {
		cols = append(cols, p.alloc("bbox backward ciou column gradient", pbDT, F, 1))
	}
	gpos := p.alloc("bbox backward chunk cat", pbDT, F, 4)
	p.drop(cols...)
	p.drop(walk...)
	p.drop(gi)
	p.drop(r.ciouSaved...)
	gPB = p.alloc("bbox backward masked_select zeros", pbDT, B, A, 4)
	ps = p.alloc("bbox backward masked_scatter prefix sum", i64, B, A, 4)
	p.drop(ps, gpos)
	p.drop(r.bboxMask, pb)
	return gD, gPB
}
