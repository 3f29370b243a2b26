package schedule

import "github.com/onnxmem/onnxmem/ir"

// Loss models what a training loss allocates, as a program fragment between
// the network's forward and its backward. It sees the graph's outputs by
// shape only. A model family supplies it with its training recipe.
type Loss interface {
	// Forward records the loss's forward on t, after the network's forward
	// and while its outputs are alive. It returns the buffers that the
	// loss's autograd graph keeps for the loss's backward; the fragment frees
	// everything else it allocates.
	Forward(t Tape, in LossInput) (saved []Buf)
	// Backward records the loss's backward on t: it frees saved as the
	// autograd engine would and returns, for each graph output, the buffer
	// that holds its gradient. Outputs may share one buffer (a gradient
	// concatenated over several outputs): the network's backward reads each
	// output's gradient as a strided view of it, and the buffer goes when
	// the last of a run of outputs that share it has been handed its
	// gradient.
	Backward(t Tape, in LossInput, saved []Buf) (grads []Buf)
}

// DenseLoss is a Loss that says which outputs' gradients are dense tensors
// of the output's shape (cross-entropy's), which the network's backward
// reads as they are; the others are strided views.
type DenseLoss interface {
	DenseGrad(in LossInput, i int) bool
}

// CountShaped is a Loss whose fragment grows with the box counts in a known
// way: at one batch and one set of outputs, any two inputs of the same
// class record the same allocations and frees, each of bytes affine in the
// numbers CountShape returns. A whole training run builds a step for every
// iteration's counts; this lets a few builds make the rest.
type CountShaped interface {
	CountShape(in LossInput) (class string, params []int64)
}

// Output is one graph output as eager PyTorch returns it: its dims and
// element type (float16 under autocast for a convolution's output).
type Output struct {
	Dims  []int64
	DType ir.DType
}

// LossInput describes the network's outputs and the targets.
type LossInput struct {
	// Batch is the batch size.
	Batch int64
	// Outputs are the graph's outputs, in graph order.
	Outputs []Output
	// AMP says the loss runs under torch.autocast.
	AMP bool
	// Boxes is the number of ground-truth objects in every image, for
	// losses whose tensors grow with the targets.
	Boxes int64
	// BoxCounts, when not nil, are the objects of each image, one a batch
	// element; Boxes is then their largest.
	BoxCounts []int64
	// Validation says the loss is the one a validation loop computes on
	// each batch's outputs to report it: under torch.no_grad (or
	// inference mode), so autograd keeps nothing and Forward frees all it
	// allocates and returns no saved buffer, with the targets already on
	// the device. Backward is never called for it.
	Validation bool
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

// Eval configures a validation step.
type Eval struct {
	// Head is the eval-mode computation that follows the graph's forward
	// (a detection head's decode), or nil when the eval forward returns the
	// graph's outputs as they are.
	Head Head
	// Float runs the copy in float32 rather than half: a validation that
	// the training loop calls with half=False (training without AMP).
	Float bool
}

// Head models what a network's head computes in eval mode beyond the
// training graph, which does not contain it.
type Head interface {
	// Resident returns the sizes of the buffers that the eval-mode module
	// keeps once it has run at these outputs' shapes (anchor points,
	// strides), resident before the step.
	Resident(outs []Output) []int64
	// Decode records the decode on t, after the forward, and returns the
	// buffers it hands back to the caller, which live to the end of the step.
	Decode(t HeadTape, outs []Output) (keep []Buf)
}

// HeadTape is the Tape of a head's decode, which may also run a
// convolution that no graph node holds.
type HeadTape interface {
	Tape
	// Conv records a cuDNN convolution call of the forward: its workspace,
	// the card's for the call (Config.Workspace), made and freed at once, as
	// a graph convolution's is. The caller allocates the call's output.
	Conv(c ConvCall)
}

// outputs describes the graph's outputs in the types eager PyTorch gives
// them.
func (b *builder) outputs() []Output {
	out := make([]Output, len(b.g.Outputs))
	for i, v := range b.g.Outputs {
		out[i] = Output{Dims: b.s.Dims[v], DType: b.dt[v]}
	}
	return out
}

// Loop is what a family's training script does around its steps in a
// whole run: the small tensors its setup and its validation keep, the
// conversions of the model it makes, and the shapes its validation
// batches take. Sizes are bytes.
type Loop struct {
	// SetupTensors are the small tensors that the setup makes and keeps
	// for the run, in order (class weights, the loss's constants, a running
	// mean of the losses).
	SetupTensors []int64
	// HalfFloatAtSetup converts the model to half precision and back once
	// in the setup, each tensor in turn (module.half().float()).
	HalfFloatAtSetup bool
	// Under DistributedDataParallel (torch.distributed.run): SetupBarriers
	// are the torch.distributed barriers the setup passes, the first
	// before the model is made, the others after its copy (the EMA);
	// RankZeroOnly says that only rank 0 keeps the copy, converts the
	// model at setup (HalfFloatAtSetup), validates and saves.
	SetupBarriers int
	RankZeroOnly  bool
	// ValTensors are the small tensors a validation keeps while it runs.
	ValTensors []int64
	// ValShape returns the height and width of a validation batch whose
	// images have aspect ratio num:den (height to width), for a training
	// image whose larger side is side.
	ValShape func(side, num, den int64) (h, w int64)
	// ValLoss, when set, reports whether the validation of a network with
	// these outputs also computes the training loss of each batch's
	// outputs (LossInput.Validation), right after the forward.
	ValLoss func(outs []Output) bool
}
