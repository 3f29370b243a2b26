package schedule

import "github.com/onnxmem/onnxmem/ir"

// Loss models what a training loss allocates, as a program fragment between
// the network's forward and its backward. It sees the head's output maps by
// shape only. The YOLOv9 task-aligned loss is one implementation; other heads
// can add theirs.
type Loss interface {
	// Forward records the loss's forward on t, after the network's forward
	// and while its outputs are alive. It returns the buffers that the
	// loss's autograd graph keeps for the loss's backward; the fragment frees
	// everything else it allocates.
	Forward(t Tape, in LossInput) (saved []Buf)
	// Backward records the loss's backward on t: it frees saved as the
	// autograd engine would and returns, for each branch of in.Maps, the
	// buffer that holds the gradient of the branch's maps, concatenated
	// along the anchors ([B, C, Σ H·W] in the maps' type): the network's
	// backward reads each map's gradient as a strided view of it and frees
	// it when the last map's gradient is consumed.
	Backward(t Tape, in LossInput, saved []Buf) (grads []Buf)
}

// LossInput describes the head's outputs and the targets.
type LossInput struct {
	// Batch is the batch size.
	Batch int64
	// Maps are the head's output maps, branch by branch (YOLOv9's dual head
	// has two), each level's dims [C, H, W] (C = 4·reg_max + classes).
	Maps [][][3]int64
	// DType is the maps' element type: float32, or float16 under AMP.
	DType ir.DType
	// AMP says the loss runs under torch.autocast, as train_dual.py
	// computes it.
	AMP bool
	// Boxes is the number of ground-truth boxes in every image.
	Boxes int64
}

// Buf names a buffer of a Tape.
type Buf int32

// Tape records allocations and frees in order.
type Tape interface {
	// Alloc records the allocation of bytes for what (a short description,
	// such as "assigner overlaps") and returns its buffer.
	Alloc(bytes int64, what string) Buf
	// Free records the free of a buffer that Alloc returned.
	Free(b Buf)
}
