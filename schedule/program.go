// Package schedule turns an ir.Graph into the program that eager PyTorch runs
// for one training step: every allocation and every free, in order, for the
// forward, the loss and the backward.
//
// Worked example. Take the block Conv → BatchNormalization → Sigmoid → Mul
// (SiLU) on an fp32 input x of 8×64×80×80 (13 MiB) with 128 output
// channels. Eager PyTorch runs three kernels and autograd records three nodes:
//
//	forward                         saved for backward
//	alloc conv out   (26 MiB)       conv: x, weight
//	alloc bn out     (26 MiB)       bn: conv out, weight, mean, invstd
//	alloc bn mean, bn invstd (512 B each)
//	alloc silu out   (26 MiB)       silu: bn out (the sigmoid is never stored)
//
// Nothing is freed in the forward: every intermediate is saved. In the
// backward the nodes run in reverse: silu allocates the gradient of bn out and
// then frees its incoming gradient and bn out; bn allocates the gradient of conv
// out, its weight and bias gradients, and frees conv out, mean and invstd; conv
// allocates the gradient of x (if x needs one) and of its weight, and frees the
// incoming gradient. Parameter gradients stay: they are the .grad fields.
//
// The rules come from PyTorch's tools/autograd/derivatives.yaml (what each op
// saves), torch/csrc/autograd/engine.cpp (nodes run in reverse creation order;
// a node's incoming gradients are freed before its saved tensors are
// released), torch/csrc/autograd/input_buffer.cpp (how gradients of a tensor
// used twice are summed, in place when one of them is not shared). What the
// model's own Python code keeps alive (a layer loop's variables, module
// arguments, lists) comes from the model's family through a Holder (holds.go).
// Each rule was checked on an H200 with the scripts in calibration/.
//
// The package knows nothing of allocator rounding: sizes here are the bytes
// requested. Package allocator turns them into what the CUDA caching allocator
// counts.
package schedule

import (
	"github.com/onnxmem/onnxmem/ir"
)

// Kind says what a buffer holds.
type Kind uint8

// The kinds of buffer.
const (
	Param      Kind = iota // a parameter or buffer of the model, resident
	Input                  // the input batch
	Activation             // an op's output
	Stats                  // batch-norm save_mean or save_invstd
	Indices                // max-pool indices
	Copy                   // a contiguous copy made inside a kernel call
	Workspace              // a cuDNN workspace
	Grad                   // the gradient of an activation
	ParamGrad              // a parameter's .grad
	Scalar                 // a loss term
	Cast                   // an autocast copy of a weight or an input
	Mask                   // what dropout keeps: native_dropout's bool mask, dropout_'s float noise
)

var kindNames = [...]string{"param", "input", "activation", "stats", "indices", "copy", "workspace", "grad", "param-grad", "scalar", "cast", "mask"}

// NumKinds is the number of kinds; Kind(NumKinds) and above are unknown.
const NumKinds = len(kindNames)

// String returns the kind's short name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Phase is the part of the step an event belongs to.
type Phase uint8

// The phases of a step, in order.
const (
	Forward   Phase = iota
	LossPhase       // the loss of the network's outputs
	Backward
	Cleanup
	Recompute // a checkpointed range's forward, rerun inside the backward
)

var phaseNames = [...]string{"forward", "loss", "backward", "cleanup", "recompute"}

// String returns the phase's name.
func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// Buffer is one allocation: a storage in PyTorch's sense.
type Buffer struct {
	// Bytes is the requested size, before the allocator's rounding.
	Bytes int64
	Kind  Kind
	// Value is the graph value whose data (or, for Grad, whose gradient) the
	// buffer holds, or ir.NoValue.
	Value ir.ValueID
	// Node is the graph node whose op allocates the buffer, or -1.
	Node int32
	// Call, for the workspace of a cuDNN convolution call, is 1 + the
	// call's index in Program.Calls; 0 for any other buffer. A replay
	// under a limit lets such a workspace fail without running out of
	// memory, as cuDNN then runs the call with another engine.
	Call int32
}

// Event is one allocation or free of a buffer.
type Event struct {
	Buf   int32
	Free  bool
	Phase Phase
	// Node is the graph node being run (forward or backward), or -1.
	Node int32
}

// Program is one training step as eager PyTorch runs it.
type Program struct {
	Graph  *ir.Graph
	Shapes *ir.Shapes
	// Buffers are indexed by the Buf of events.
	Buffers []Buffer
	// ModelBuffers reports, by value, the model's buffers that are no
	// parameters and no batch norm statistics: integer index tables, float
	// tables a linear reads (register_buffer's, which get no gradient).
	ModelBuffers []bool
	// Resident are the buffers allocated when the model is loaded, in the order
	// the model's parameters and buffers are moved to the device.
	Resident []int32
	// ResidentRoles says, for each buffer of Resident, what it is.
	ResidentRoles []Role
	// ResidentBuffer says, for each buffer of Resident, whether it is one
	// of the model's buffers rather than a parameter: a batch norm's
	// running statistics and num_batches_tracked, a register_buffer's
	// table (what module.buffers() lists), or a plain tensor attribute
	// that the model moves with them (an OffGraph tensor that is no
	// Parameter).
	ResidentBuffer []bool
	// ResidentOff says, for each buffer of Resident, which tensor of
	// OffGraph it is (1 + its index), or 0 for a graph's tensor or
	// anything else.
	ResidentOff []int
	// OffGraph are the tensors that the model moves to the device beyond
	// the graph's (Config.OffGraph): resident after the graph's parameters
	// and buffers in the model and in each copy of it.
	OffGraph []OffGraph
	// ResidentLoad, when not nil, holds for each buffer of Resident the
	// bytes it had when it was loaded, before model.half() converted it: a
	// model step in half precision loads the model in float32 and then
	// halves its floating tensors one by one (Module._apply), each half
	// tensor allocated before its float32 one is freed.
	ResidentLoad []int64
	// StateOrder lists a train step's optimizer-state buffers (of Resident)
	// in the order a first optimizer step creates them, and StateAt[i] is
	// the index of the event before which it creates StateOrder[i]: a
	// training run's first step starts without them (torch.optim makes its
	// state lazily, in step()).
	StateOrder []int32
	StateAt    []int
	// OptStep and OptStepEnd delimit a train step's optimizer.step(): the
	// events from OptStep to OptStepEnd-1, which a step that GradScaler
	// skips (it found an inf or a NaN in the gradients) does not run.
	OptStep, OptStepEnd int
	// Input is the input batch's buffer; it is allocated before the step starts.
	Input int32
	// Outputs are the graph's outputs as the forward returns them: their
	// dims at the shape built and their types under eager PyTorch. (A
	// program that onnxmem derives for another batch size from a build at
	// the same image size keeps the build's.)
	Outputs []Output
	// Events are the step, from the first op of the forward to the last free.
	Events []Event
	// ForwardEnd is the index of the first event after the forward (the model's
	// return); BackwardStart and BackwardEnd delimit the backward.
	ForwardEnd, BackwardStart, BackwardEnd int
	// StepEnd is the index of the event that frees the input batch, the last
	// of the step: before it, the outputs and the loss have been dropped.
	StepEnd int
	// LayerEnds mark, in forward order, where each top-level layer's forward
	// returns: Event is the index of the first event after the layer's ops
	// and before the layer loop drops the previous layer's output, the moment
	// a forward hook on the layer sees.
	LayerEnds []LayerEnd
	// ParamGrads are the .grad buffers that outlive the step, in parameter
	// order: zero_grad(set_to_none=True) frees them in this order.
	ParamGrads []int32
	// PrevPred are the previous step's outputs, alive before the step
	// starts and freed by its events after the forward (Train's
	// PrevPredAlive); PrevPredFrom[i] is the buffer of this step's outputs
	// that becomes PrevPred[i] in the next step: it is never freed here.
	PrevPred, PrevPredFrom []int32
	// Persistent are the buffers that the step allocates the first time it runs
	// and that stay allocated for the rest of the process: the cuBLAS and
	// cuBLASLt workspaces of the handles its matrix products use, one per
	// (thread, stream), which CublasHandlePool.cpp caches until exit. In the
	// first step (the harness's warm-up) Persistent[i] is allocated just before
	// event OnceAt[i] (len(Events) for after the last); in every later step
	// it is alive from the start.
	Persistent   []int32
	PersistentAt []int
	// Calls are the program's cuDNN convolution calls (no reductions), in
	// the order it makes them, each with the batch dim of its program; a
	// workspace buffer's Call points into them.
	Calls []ConvCall
	// Harness, when not empty, is where the reference measurements of the
	// model's family empty the caching allocator's cache around a model or
	// eval step's warm-up: "before_step" or "before_warmup" (the values of
	// onnxmem's Scenario.EmptyCache). The caller of Build sets it.
	Harness string
}

// OffGraph is a tensor that a model moves to the device when it loads and
// that its training graph does not show: a frozen parameter that the
// training forward does not use, or a plain tensor attribute that the
// model's _apply moves with its parameters.
type OffGraph struct {
	// Name is its attribute's path, such as "head.stride".
	Name         string
	Elems, Bytes int64
	// Param says model.parameters() lists it; Buffer says model.buffers()
	// does; neither, it counts only in the allocated bytes.
	Param, Buffer bool
}

// Role says what a resident buffer is.
type Role uint8

// The roles of resident buffers.
const (
	// RoleModel is the model's own parameters and buffers.
	RoleModel Role = iota
	// RoleCopy is a copy of them: the EMA model of a train step, the half
	// copy that an eval step runs.
	RoleCopy
	// RoleWorkspace is the cuBLAS workspace that an earlier matrix product
	// of the process made.
	RoleWorkspace
	// RoleScalar is one of the training loop's small tensors.
	RoleScalar
	// RoleState is the optimizer's state.
	RoleState
	// RoleHead is what an eval head keeps in its module (anchors, strides).
	RoleHead
	// RoleInput is a graph input after the first (a text model's
	// attention mask or token type ids), which the caller holds as it
	// holds the batch.
	RoleInput
)

var roleNames = [...]string{"model", "copy", "workspace", "scalar", "state", "head", "input"}

// String returns the role's short name.
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "unknown"
}

// LayerEnd marks the end of one top-level layer's forward.
type LayerEnd struct {
	Layer int
	Event int
}
