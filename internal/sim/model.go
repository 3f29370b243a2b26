// Package onnxmem predicts the GPU memory of training a network from its ONNX
// graph: the peak that torch.cuda.max_memory_allocated reports for one
// training step, where it falls, and which tensors make it.
//
// The pipeline is: ONNX bytes → ir.Graph (Load) → the graph as its model
// family prepares it (package family: top-level layers, export artefacts
// undone) → shapes at a batch and image size (ir.Graph.Infer) → the step's
// program of allocations and frees (schedule.Build, with the family's holds,
// eval head and training recipe) → its liveness (package liveness) and the
// CUDA caching allocator's counters over the same events (package
// allocator) → a Result. docs/architecture.md draws it.
//
// A Result is what the measurement harness of a "model step" reads: the
// parameters and the input batch are resident, one warm-up step has run (so
// the allocator's cache holds its segments, or, where Options.EmptyCache
// empties it again, those its .grad buffers lie in; those buffers are freed
// at the start), and the measured step runs the forward, the loss
// sum(o.sum() for o in outputs) and the backward. Process runs scenarios
// one after another in one process.
package sim

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/onnxmem/onnxmem/internal/regular"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/family/registry"
	"github.com/onnxmem/onnxmem/internal/cudnn"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Model is a loaded graph, prepared for simulation by its model family.
type Model struct {
	// Name is the file's base name without ".onnx", or the built-in name.
	Name string
	// Family is the name of the model family detected from the graph
	// (package family; Families lists them), the generic family for a graph
	// that no other family claims. Options.Family overrides it.
	Family string
	// Graph is the graph as the detected family prepared it: top-level
	// layers assigned, the exporter's flattening undone.
	Graph *ir.Graph

	// Note, when not empty, says why no other family claimed the graph: a
	// graph that resembles one family's but lacks its head.
	Note string

	// Builtin, when not empty, names the built-in model that stands for
	// the loaded file: the file is an inference export (export.py folds
	// the batch norms into the convolutions and fuses re-parameterized
	// ones, so it holds no training graph), and the built-in model of
	// that name, built with the file's classes, has the same
	// convolutions. Graph is then the built-in model's.
	Builtin string

	raw   *ir.Graph // as ir.Load returned it
	cache *preparedSet
}

// preparedSet holds the model as each family it was simulated as prepared
// it: at most one entry per family, shared by the Models that As returns.
type preparedSet struct {
	mu    sync.Mutex
	preps []*prepared
}

// prepared is the model as one family sees it.
type prepared struct {
	fam   family.Family
	graph *ir.Graph
	// holds caches what the forward keeps alive: it depends on the graph
	// alone, and a sweep builds the same graph's program many times.
	once  sync.Once
	holds *schedule.Holds
	// classes caches programs by shape class, to derive those of other
	// batch sizes (classes.go), and a training run's by box counts
	// (counts.go).
	classes classCache
	counts  countCache
}

// Holds implements schedule.Holder with the family's answer, computed once.
func (p *prepared) Holds(f *schedule.Flow) *schedule.Holds {
	p.once.Do(func() { p.holds = p.fam.Holds(f) })
	return p.holds
}

// Load reads an ONNX file. Weights are never read: a weightless export loads
// the same as one with its weights.
func Load(path string) (*Model, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	defer f.Close()
	return loadFile(f, path)
}

// LoadIn reads the ONNX file name inside root, as Load does, and refuses a
// name that leads out of root: an absolute path, "..", or a symbolic link
// that points outside it (os.Root's rules). Services that load the models
// their users name give them a root this way.
func LoadIn(root *os.Root, name string) (*Model, error) {
	f, err := regular.OpenIn(root, name)
	if err != nil {
		// Name the file by its path, the root's name included.
		if pe, ok := err.(*fs.PathError); ok {
			err = &fs.PathError{Op: "open", Path: filepath.Join(root.Name(), pe.Path), Err: pe.Err}
			// os.Root's error for a way out has no exported value.
			if pe.Err.Error() == "path escapes from parent" {
				return nil, fmt.Errorf("onnxmem: %w: %s leads out of %s (a symbolic link, or \"..\"); give a file inside it", err, name, root.Name())
			}
		}
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	defer f.Close()
	return loadFile(f, filepath.Join(root.Name(), name))
}

// loadFile reads the open model file f, named path for messages: a regular
// file of at most MaxModelBytes.
func loadFile(f *os.File, path string) (*Model, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("onnxmem: %s is not a regular file: give the path of an .onnx file", path)
	case st.Size() > MaxModelBytes:
		return nil, fmt.Errorf("onnxmem: %s holds %d bytes, more than an ONNX protobuf can (%d): export the weights as external data, or strip them (onnxmem needs only their dims and types)", path, st.Size(), int64(MaxModelBytes))
	}
	// The file may have grown since the Stat: read at most the limit.
	data, err := io.ReadAll(io.LimitReader(f, MaxModelBytes+1))
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	if int64(len(data)) > MaxModelBytes {
		return nil, fmt.Errorf("onnxmem: %s holds more than %d bytes, more than an ONNX protobuf can", path, int64(MaxModelBytes))
	}
	return LoadBytes(strings.TrimSuffix(filepath.Base(path), ".onnx"), data)
}

// MaxModelBytes is the largest model file Load reads: 2 GiB, the limit of
// a protobuf message, which ONNX files with weights beyond it escape by
// keeping them as external data.
const MaxModelBytes = 2 << 30

// LoadBytes decodes an ONNX model held in memory and prepares it for the
// family that Detect finds. An inference export that the family reads as
// one of the built-in models loads as that model (Model.Builtin).
func LoadBytes(name string, data []byte) (*Model, error) { return loadBytes(name, data, true) }

// loadBytes is LoadBytes; with standIns false it takes an inference export
// as it is (a built-in model, which is none, is loaded so).
func loadBytes(name string, data []byte, standIns bool) (*Model, error) {
	g, err := ir.Load(data)
	if err == nil {
		err = g.CheckEnds()
	}
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %s: %w", name, err)
	}
	m := &Model{Name: name, raw: g, cache: &preparedSet{}}
	fam, note := registry.Detect(g)
	p, err := m.prepare(fam.Name())
	if err != nil {
		return nil, err
	}
	m.Family, m.Graph, m.Note = p.fam.Name(), p.graph, note
	if standIns && family.CheckStep(p.fam, p.graph) != nil {
		if b := builtinFor(p); b != nil {
			b.Name, b.Builtin = name, b.Name
			return b, nil
		}
	}
	return m, nil
}

// builtinFor returns the built-in model that stands for an inference export
// (a graph that its family's CheckStep refuses, which has no training
// graph): the first of models.Names that the family reads as the same
// model (family.Family.Deployment), built with the export's classes; or
// nil when none is.
func builtinFor(p *prepared) *Model {
	classes, same, ok := family.Deployment(p.fam, p.graph)
	if !ok || classes < 1 || classes > math.MaxInt32 {
		return nil
	}
	for _, name := range registry.Builtins() {
		// A built-in model never looks for a stand-in itself; one that
		// cannot be built with these classes stands for nothing.
		b, err := BuiltinClasses(name, classes)
		if err == nil && b.Family == p.fam.Name() && same(b.Graph) {
			return b
		}
	}
	return nil
}

// Families lists the model families a Scenario may name, in the order they
// are tried on a loaded graph.
func Families() []string { return registry.Names() }

// prepare returns the model as the named family prepares it, from the
// model's cache when it can.
func (m *Model) prepare(name string) (*prepared, error) {
	c := m.cache
	if c == nil || m.raw == nil {
		return nil, fmt.Errorf("onnxmem: model %q was not made by Load, LoadBytes, Builtin or As: it has no loaded graph to prepare", m.Name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.preps {
		if p.fam.Name() == name {
			return p, nil
		}
	}
	fam, err := registry.ByName(name)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
	}
	// Each family assigns layers of its own: it gets its own copy of the
	// nodes.
	g := *m.raw
	g.Nodes = slices.Clone(m.raw.Nodes)
	pg, err := fam.Prepare(&g)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
	}
	p := &prepared{fam: fam, graph: pg}
	c.preps = append(c.preps, p)
	return p, nil
}

// workspaces are the cuDNN workspaces that every step is simulated with:
// the H200's, measured (package cudnn). They stand for every card, which
// other cards' heuristics may not choose alike.
var workspaces = cudnn.For("h200")

// wsPolicy is the workspaces a scenario's convolution calls take: the
// measured table's, or none at all (Options.NoConvWorkspace: the bottom of
// the band of a card whose workspaces were not measured). A reduction's
// staging is the same either way.
type wsPolicy struct{ none bool }

// wsFor returns sc's workspace policy.
func wsFor(sc Options) wsPolicy { return wsPolicy{none: sc.NoConvWorkspace} }

// Workspace is cudnn.Card.Workspace under the policy.
func (w wsPolicy) Workspace(c schedule.ConvCall) int64 {
	if w.none && !schedule.IsReduction(c.Which) {
		return 0
	}
	return workspaces.Workspace(c)
}

// WorkspaceOf is cudnn.Card.WorkspaceOf under the policy.
func (w wsPolicy) WorkspaceOf(c schedule.ConvCall, row cudnn.Row, found bool) int64 {
	if w.none && !schedule.IsReduction(c.Which) {
		return 0
	}
	return workspaces.WorkspaceOf(c, row, found)
}

// Range is a half-open range [From, To) of top-level layers.
type Range struct{ From, To int }

// Optimizer names the optimizer of a train step.
type Optimizer string

// The optimizers. Each keeps its state in buffers the size of the
// parameters: SGD with momentum one, Adam two, AdamW with amsgrad three,
// Lion one; None takes no step.
const (
	SGD   = Optimizer(schedule.SGD)
	Adam  = Optimizer(schedule.Adam)
	AdamW = Optimizer(schedule.AdamW)
	Lion  = Optimizer(schedule.Lion)
	None  = Optimizer(schedule.None)
)

// Optimizers lists the optimizers a Scenario may name.
func Optimizers() []Optimizer { return []Optimizer{SGD, Adam, AdamW, Lion, None} }

// ParseOptimizer returns the optimizer that name names, its case ignored,
// so that a training script's own spelling (--optimizer LION) is taken as
// it is written.
func ParseOptimizer(name string) (Optimizer, error) {
	for _, o := range Optimizers() {
		if strings.EqualFold(name, string(o)) {
			return o, nil
		}
	}
	return "", fmt.Errorf("onnxmem: unknown optimizer %q: want SGD, Adam, AdamW, Lion (LION) or none", name)
}

// Options is one configuration to simulate. The zero value of a field
// means its default, which Defaults fills in.
type Options struct {
	// Batch is the batch size; Height and Width the input image's size.
	Batch, Height, Width int64
	// Seq is a text model's sequence length (ir.Binding.Seq), 0 for an
	// image model.
	Seq int64
	// AMP runs the forward under torch.autocast('cuda', torch.float16), as
	// most training scripts do by default.
	AMP bool
	// AMPDType is autocast's type with AMP: "" or "float16", or
	// "bfloat16". bfloat16 makes the same tensors, of the same sizes, as
	// float16 (measured on the H200, calibration/bf16.py: the requested
	// peak equal to the byte in 16 model steps); only cuDNN's workspaces
	// differ, and they come from a table measured in bfloat16
	// (package cudnn): the 16 measured bfloat16 steps are predicted with
	// their reserved peaks to the byte.
	AMPDType string `json:",omitempty"`
	// Half runs the model in half precision (model.half() and a half input).
	// It excludes AMP.
	Half bool
	// Segments checkpoints the top-level layers as checkpoint_sequential does
	// with this many segments (the first Segments-1 chunks of n/Segments
	// layers run under checkpoint(use_reentrant=False)). 0 or 1 means no
	// checkpointing.
	Segments int
	// Checkpoint, when not empty, is an explicit plan: these ranges of
	// top-level layers run under checkpoint(use_reentrant=False). It
	// excludes Segments.
	Checkpoint []Range
	// Eval simulates the family's validation step instead of a model step:
	// the forward of a half copy of the model under torch.no_grad(), with
	// the family's eval-mode head (a detection head's decode), at batch
	// Batch (validation often runs at twice the training batch). AMP, Half
	// and checkpointing do not apply.
	Eval bool
	// EvalFloat, with Eval, runs the copy in float32 instead of half: the
	// validation that a training loop runs with half=False, as it does
	// when it trains without AMP.
	EvalFloat bool `json:",omitempty"`
	// Train simulates a full step of the family's training script instead of
	// a model step (the family's recipe): the batch's upload, the forward
	// (under autocast with AMP), the family's loss with Boxes ground-truth
	// boxes in every image, the backward, GradScaler, gradient clipping, the
	// Optimizer's step (default SGD), zero_grad and, with EMA, the EMA
	// update. The optimizer's state exists before the step: the warm-up's
	// optimizer.step() made it, in the cache its activations left (see
	// WarmSteps).
	Train bool
	Boxes int64
	// BoxCounts, when not nil, are the ground-truth boxes of each image of
	// the batch (Batch of them), as a real batch has them; Boxes must then
	// be 0 or their largest, which is what the loss pads every image to.
	BoxCounts []int64 `json:",omitempty"`
	Optimizer Optimizer
	EMA       bool
	// Trainer names the family's training script ("" is the family's
	// default for the graph); the family's CheckTrain lists the names it
	// knows.
	Trainer string `json:",omitempty"`
	// PrevPredAlive keeps the previous iteration's outputs (pred) alive
	// until this step's forward returns, as a training loop that rebinds
	// them does (pred = model(imgs) drops the old pred only once the new
	// one is made); without it the step starts with them gone, as a
	// harness that deletes them does.
	PrevPredAlive bool `json:",omitempty"`
	// WarmSteps is how many steps of a train step's loop run before the
	// measured one: the last of them makes the optimizer's state, the ones
	// before it are the iterations whose optimizer step GradScaler skipped
	// (it found an inf in the gradients, scaled by 65536 at first, and
	// halves its scale each time), which run the forward and backward and
	// so shape the cache without making state. 0 means DefaultAMPWarmSteps
	// under float16 AMP and 1 otherwise: float32 gradients and bfloat16's
	// float32 range leave GradScaler nothing to skip. The first measured
	// step after the state is made (../shared/groundtruth's) depends on it;
	// a step of a long run, whose cache has settled, does not once it
	// is 3 or more. A Run whose events mark no skipped iteration skips its
	// first WarmSteps-1.
	WarmSteps int `json:",omitempty"`
	// CuBLASWorkspace is the cuBLAS workspace left allocated by earlier work
	// in the process, resident in train and eval steps (made by the first
	// forward's first Gemm in a family's train step that says so, and in a
	// model step); 0 means DefaultCuBLASWorkspace.
	CuBLASWorkspace int64
	// AllocConf is the caching allocator's options as PYTORCH_CUDA_ALLOC_CONF
	// gives them ("expandable_segments:True,max_split_size_mb:128"; see
	// allocator.ParseConf); "" is PyTorch's default allocator.
	// per_process_memory_fraction is refused here: give the limit it sets as
	// Capacity.
	AllocConf string `json:",omitempty"`
	// Capacity, when positive, is the caching allocator's limit in bytes,
	// what torch.cuda.set_per_process_memory_fraction(f) sets (f ×
	// total_memory) and, on a card, its memory less the CUDA context
	// (Device.Usable). The allocator never reserves segments beyond it: a
	// request that would cross it first releases the cached segments that
	// hold no live block and retries, as PyTorch does, and only then does
	// the step run out of memory (Result.OOM). 0 means no limit.
	Capacity int64
	// NoConvWorkspace runs every cuDNN convolution without a workspace:
	// the smallest any engine needs (cuDNN's fallback list always holds
	// one that needs none), the bottom of the band of a card whose
	// workspaces were not measured.
	NoConvWorkspace bool `json:",omitempty"`
	// NoFlash runs fused attention without the flash kernel, as on a card
	// below compute capability 8.0: memory-efficient attention in half
	// precision too (schedule.Config.NoFlash).
	NoFlash bool `json:",omitempty"`
	// Family, when not empty, names the model family to simulate the graph
	// as (see Families), in place of the one detected.
	Family string `json:",omitempty"`
	// EmptyCache says where the measuring harness calls
	// torch.cuda.empty_cache() around the warm-up step that runs before
	// the measured one: EmptyCacheStep, EmptyCacheWarmUp or
	// EmptyCacheNever. "" is EmptyCacheWarmUp for a train step, as a
	// training loop runs its steps, and for a model or eval step the
	// harness of the model family's reference measurements (the family's
	// Harness: EmptyCacheStep or EmptyCacheWarmUp).
	// The bytes requested are the same; where the cached blocks lie, and
	// so the reserved peak and the blocks' rounding, are not.
	EmptyCache EmptyCache `json:",omitempty"`
	// GPUs, when 1 or more, makes a training run (Model.Run) one rank of
	// DistributedDataParallel over that many GPUs, as
	// torch.distributed.run --nproc_per_node GPUs starts the script: Batch
	// is the rank's share; Rank 0 keeps the EMA, validates and saves, the
	// other ranks do none of it (ddp.go). Steps take no GPUs.
	GPUs, Rank int64 `json:",omitempty"`
	// SyncBN converts the model's batch norms to SyncBatchNorm (a
	// script's --sync-bn): the same bytes as batch norm's (ddp.go).
	SyncBN bool `json:",omitempty"`
}

// EmptyCache is where a harness empties the caching allocator's cache
// (torch.cuda.empty_cache()) before a measured step.
type EmptyCache string

const (
	// EmptyCacheStep empties the cache before the warm-up and again just
	// before the measured step, while the warm-up's .grad tensors are
	// alive, so that the segments holding them stay cached and the others
	// go: ../shared/groundtruth's harness ("empty_cache() ran before each
	// scenario"), whose model and eval steps this reproduces.
	EmptyCacheStep EmptyCache = "before_step"
	// EmptyCacheWarmUp empties it before the warm-up only: the measured step
	// runs in the cache the warm-up left, as a training loop's next step
	// does and as a harness that runs a step twice in a row measures it
	// (the torchvision ground truth's). It is the default of train steps.
	EmptyCacheWarmUp EmptyCache = "before_warmup"
	// EmptyCacheNever never empties it, not even after loading the model: a
	// process's scenarios then run in what every earlier one cached
	// (Process).
	EmptyCacheNever EmptyCache = "never"
)

// Defaults returns sc with every zero field that has a default set to it:
// the SGD optimizer for train steps and DefaultCuBLASWorkspace. It is the
// one place that says what a Scenario's zero fields mean, but for
// EmptyCache, whose default depends on the model's family too
// (emptyCacheOf).
func (sc Options) Defaults() Options {
	if sc.Train && sc.Optimizer == "" {
		sc.Optimizer = SGD
	}
	if sc.CuBLASWorkspace == 0 {
		sc.CuBLASWorkspace = DefaultCuBLASWorkspace
	}
	return sc
}

// DefaultAMPWarmSteps is Options.WarmSteps's default under float16 AMP:
// three iterations whose optimizer step GradScaler skips, then the one that
// makes the optimizer's state. At GradScaler's initial scale of 65536 a
// freshly initialized detector's float16 gradients overflow: the official
// code's steps measured on the H200 skipped 0 to 7 (../shared/groundtruth's
// warm_steps, calibration/train_step.py), and 3 to 8 in the whole runs of
// calibration/train_run.py; the cache the skipped iterations leave is the
// same after 2 as after 7 (TestWarmStepsSettle), and with 3 the runs'
// reserved memory after every event is within 0.6% (TestRunMeasured).
const DefaultAMPWarmSteps = 4

// WarmStepsUsed returns how many iterations of the training loop a train
// step's simulation runs before the measured one: WarmSteps, or its default
// for the scenario's precision; 0 for other steps.
func (sc Options) WarmStepsUsed() int {
	if !sc.Train {
		return 0
	}
	return sc.warmSkips() + 1
}

// warmSkips returns how many of sc's warm-up steps GradScaler skips.
func (sc Options) warmSkips() int {
	switch {
	case !sc.Train:
		return 0
	case sc.WarmSteps > 0:
		return sc.WarmSteps - 1
	case sc.AMP && sc.AMPDType != "bfloat16":
		return DefaultAMPWarmSteps - 1
	}
	return 0
}

// DefaultCuBLASWorkspace is PyTorch's default cuBLAS workspace on Hopper
// GPUs such as the H100 and H200: CUBLAS_WORKSPACE_CONFIG ":4096:8", eight
// 4 MiB chunks (aten/src/ATen/cuda/CublasHandlePool.cpp). Older GPUs default
// to ":4096:2:16:8", 8.125 MiB.
const DefaultCuBLASWorkspace = 32 << 20

// CuBLASLtWorkspace is PyTorch's cuBLASLt workspace on CUDA,
// CUBLASLT_WORKSPACE_SIZE's default of 1024 KiB (CublasHandlePool.cpp),
// which a linear layer's addmm through cuBLASLt allocates once per thread.
const CuBLASLtWorkspace = 1 << 20

// Tensor is one buffer alive at the peak.
type Tensor struct {
	// Name is the graph value's name, or a description for buffers that hold
	// no value (a workspace, batch-norm statistics).
	Name string
	Kind string
	// Bytes is the request rounded to the allocator's 512-byte blocks;
	// Requested what was asked. A block that the allocator did not split
	// holds up to 1 MiB more, which is why the buffers alive at the peak add
	// up to a little less than Result.Peak.
	Bytes, Requested int64
	// Node is the op that allocated it ("" for resident buffers).
	Node string
}

// MaxAtPeak is how many of the largest tensors alive at the peak a Result
// lists.
const MaxAtPeak = 20

// KindBytes is the live bytes and buffer count of one kind of buffer.
type KindBytes struct {
	Kind  string
	Bytes int64
	Count int
}

// Result is the prediction for one scenario. All sizes are bytes.
type Result struct {
	Scenario Options
	// Peak is allocated_bytes.all.peak of the measured step: the figure that
	// torch.cuda.max_memory_allocated reports. PeakRequested is the same before
	// the allocator's rounding, PeakReserved the segments held.
	Peak, PeakRequested, PeakReserved int64
	// ReservedAfter is the segments reserved when the step ends, what
	// torch.cuda.memory_reserved() reads then (GPUMem).
	ReservedAfter int64
	// M0 is allocated before the step (parameters and the input); AfterForward
	// after the forward, ForwardPeak the peak during it, AfterBackward after
	// the backward and the release of the outputs and the loss.
	M0, AfterForward, ForwardPeak, AfterBackward int64
	// Where the peak falls: the phase, the op's node name and its top-level
	// layer (-1 when none), and the index of the event in the step.
	PeakPhase string
	PeakNode  string
	PeakLayer int
	PeakEvent int
	// AtPeak lists the MaxAtPeak largest buffers alive at the peak, largest
	// first, then in buffer order; PeakByKind sums every live buffer by kind,
	// largest first. Sizes are the rounded requests.
	AtPeak     []Tensor
	PeakByKind []KindBytes
	// OOM is set when Capacity was given and a segment could not be reserved
	// even after the allocator released its cache: PyTorch raises
	// torch.OutOfMemoryError there. The step's figures then stop at that
	// request.
	OOM bool
	// FellBack counts the cuDNN convolution shapes whose workspace the
	// allocator could not serve under Capacity, so far in the process:
	// cuDNN ran them with another engine (taken to need no workspace) and
	// kept it for later calls of the shape, where PyTorch raises no error.
	FellBack int
	// Events is the number of allocation events in the step.
	Events int
	// Retries counts the requests of the replay, warm-up included, that
	// the allocator served (or failed) only after releasing its cache
	// under Capacity: torch.cuda.memory_stats()'s num_alloc_retries.
	Retries int64 `json:",omitempty"`
}

// allocConfig returns the caching allocator's options of the scenario.
func (sc Options) allocConfig() (allocator.Config, error) {
	c, err := allocator.ParseConf(sc.AllocConf)
	if err != nil {
		return c, fmt.Errorf("onnxmem: alloc conf: %w", err)
	}
	if c.PerProcessMemoryFraction > 0 {
		return c, fmt.Errorf("onnxmem: alloc conf %q: per_process_memory_fraction needs the device's total memory: give the limit it sets, int(f × total_memory), as the capacity instead", sc.AllocConf)
	}
	return c, nil
}

// Supported reports why a scenario cannot be simulated yet, or nil.
func (sc Options) Supported() error {
	switch {
	case sc.AMP && sc.Half:
		return fmt.Errorf("onnxmem: amp and half exclude each other: autocast runs on float32 parameters")
	case sc.Segments > 1 && len(sc.Checkpoint) > 0:
		return fmt.Errorf("onnxmem: segments and an explicit checkpoint plan exclude each other")
	case sc.Train && sc.Eval:
		return fmt.Errorf("onnxmem: a scenario is a train step or an eval step, not both")
	case sc.Train && sc.Half:
		return fmt.Errorf("onnxmem: train steps train float32 parameters, with or without amp: half does not apply")
	case sc.AMPDType != "" && sc.AMPDType != "float16" && sc.AMPDType != "bfloat16":
		return fmt.Errorf("onnxmem: autocast type %q: want float16 or bfloat16", sc.AMPDType)
	case sc.AMPDType != "" && !sc.AMP:
		return fmt.Errorf("onnxmem: autocast type %s without amp: the type is autocast's", sc.AMPDType)
	case sc.GPUs < 0:
		return fmt.Errorf("onnxmem: gpus %d: want the GPUs of DistributedDataParallel, or 0 for one process without it", sc.GPUs)
	case sc.GPUs > 0 && !sc.Train:
		return fmt.Errorf("onnxmem: gpus %d: DistributedDataParallel trains, and this is not a train step", sc.GPUs)
	case sc.Rank < 0 || sc.Rank > 0 && sc.Rank >= sc.GPUs:
		return fmt.Errorf("onnxmem: rank %d of %d GPUs: want 0 to %d", sc.Rank, sc.GPUs, max(sc.GPUs-1, 0))
	case sc.SyncBN && sc.GPUs == 0:
		return fmt.Errorf("onnxmem: sync_bn without gpus: SyncBatchNorm is DDP's (a script's --sync-bn takes effect only under torch.distributed.run)")
	case sc.PrevPredAlive && !sc.Train:
		return fmt.Errorf("onnxmem: prev_pred_alive: the previous iteration's outputs belong to a training loop, and this is not a train step")
	case sc.WarmSteps != 0 && !sc.Train:
		return fmt.Errorf("onnxmem: warm steps %d: the warm-up iterations belong to a train step's loop, and this is not a train step", sc.WarmSteps)
	case sc.WarmSteps < 0:
		return fmt.Errorf("onnxmem: warm steps %d: must be 1 or more (0 for the default)", sc.WarmSteps)
	case sc.WarmSteps > 1 && (!sc.AMP || sc.AMPDType == "bfloat16"):
		return fmt.Errorf("onnxmem: warm steps %d without float16 amp: GradScaler skips no optimizer step there, so the first step makes the optimizer's state; give 1", sc.WarmSteps)
	case sc.Trainer != "" && !sc.Train:
		return fmt.Errorf("onnxmem: trainer %q: a trainer names a train step's script, and this is not a train step", sc.Trainer)
	case sc.BoxCounts != nil && !sc.Train:
		return fmt.Errorf("onnxmem: box counts: the boxes of each image belong to a train step, and this is not one")
	case sc.BoxCounts != nil && int64(len(sc.BoxCounts)) != sc.Batch:
		return fmt.Errorf("onnxmem: %d box counts for a batch of %d: give one count for each image", len(sc.BoxCounts), sc.Batch)
	case sc.BoxCounts != nil && slices.Min(sc.BoxCounts) < 0:
		return fmt.Errorf("onnxmem: box count %d: counts must be 0 or more", slices.Min(sc.BoxCounts))
	case sc.BoxCounts != nil && sc.Boxes != 0 && sc.Boxes != slices.Max(sc.BoxCounts):
		return fmt.Errorf("onnxmem: boxes %d with box counts whose largest is %d: give one or the other", sc.Boxes, slices.Max(sc.BoxCounts))
	case sc.Train && sc.Boxes < 0:
		return fmt.Errorf("onnxmem: boxes %d: must be 0 or more", sc.Boxes)
	case sc.EvalFloat && !sc.Eval:
		return fmt.Errorf("onnxmem: eval float: the float32 copy belongs to an eval step, and this is not one")
	case sc.Eval && (sc.AMP || sc.Half || sc.Segments > 1 || len(sc.Checkpoint) > 0):
		return fmt.Errorf("onnxmem: the eval step runs a half copy without gradients: amp, half and checkpointing do not apply")
	case sc.Segments < 0:
		return fmt.Errorf("onnxmem: segments %d: must be 0 or more", sc.Segments)
	case sc.Seq < 0:
		return fmt.Errorf("onnxmem: sequence length %d: must be at least 1", sc.Seq)
	case sc.Batch < 1:
		return fmt.Errorf("onnxmem: batch %d: must be at least 1", sc.Batch)
	case sc.Height < 0 || sc.Width < 0 || sc.Seq == 0 && (sc.Height < 1 || sc.Width < 1):
		return fmt.Errorf("onnxmem: image %dx%d: both sides must be at least 1", sc.Height, sc.Width)
	case sc.Family != "" && !slices.Contains(Families(), sc.Family):
		return fmt.Errorf("onnxmem: unknown family %q: want one of %s", sc.Family, strings.Join(Families(), ", "))
	case sc.EmptyCache != "" && sc.EmptyCache != EmptyCacheStep && sc.EmptyCache != EmptyCacheWarmUp && sc.EmptyCache != EmptyCacheNever:
		return fmt.Errorf("onnxmem: empty cache %q: want %s, %s or %s", sc.EmptyCache, EmptyCacheStep, EmptyCacheWarmUp, EmptyCacheNever)
	case sc.Optimizer != "" && !slices.Contains(Optimizers(), sc.Optimizer):
		return fmt.Errorf("onnxmem: unknown optimizer %q: want SGD, Adam, AdamW, Lion or none", sc.Optimizer)
	}
	_, err := sc.allocConfig()
	return err
}

// Program builds the step's program for a scenario without running the
// allocator over it.
func (m *Model) Program(sc Options) (*schedule.Program, error) {
	p, sc, err := m.programPrep(sc)
	if err != nil {
		return nil, err
	}
	prog, _, err := m.build(p, sc, wsFor(sc).Workspace)
	if err != nil {
		return nil, err
	}
	return prog, checkBytes(prog, sc)
}

// programPrep checks a scenario and returns the model as its family
// prepares it, with the scenario's defaults filled in.
func (m *Model) programPrep(sc Options) (*prepared, Options, error) {
	if err := sc.Supported(); err != nil {
		return nil, sc, err
	}
	if sc.GPUs != 0 {
		return nil, sc, fmt.Errorf("onnxmem: gpus %d: DistributedDataParallel is simulated for whole training runs, whose ranks differ, not for a lone step: simulate the run", sc.GPUs)
	}
	p, err := m.forScenario(sc)
	if err != nil {
		return nil, sc, err
	}
	if err := m.checkLayers(sc, layers(p.graph)); err != nil {
		return nil, sc, err
	}
	if err := family.CheckStep(p.fam, p.graph); err != nil {
		if _, _, ok := family.Deployment(p.fam, p.graph); ok {
			err = fmt.Errorf("%w; no built-in model (%s) has its convolutions to stand for it", err, strings.Join(registry.Builtins(), ", "))
		}
		return nil, sc, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
	}
	return p, sc.Defaults(), nil
}

// checkLayers returns why sc's checkpointing does not fit a graph of n
// top-level layers, or nil.
func (m *Model) checkLayers(sc Options, n int) error {
	if sc.Segments > max(n, 1) {
		return fmt.Errorf("onnxmem: segments %d: %s has %d top-level layers, and checkpoint_sequential cannot cut them into more segments than layers (PyTorch raises: its segment size would be 0); give at most %d", sc.Segments, m.Name, n, n)
	}
	for i, r := range sc.Checkpoint {
		if r.From < 0 || r.To <= r.From || r.To > n || (i > 0 && r.From < sc.Checkpoint[i-1].To) {
			return fmt.Errorf("onnxmem: checkpoint range %d-%d: %s has %d top-level layers (0 to %d); give ranges within them, in order and disjoint", r.From, r.To-1, m.Name, n, n-1)
		}
	}
	return nil
}

// build infers the shapes of sc and builds its program, asking workspace
// for the cuDNN workspace of each convolution call; it also returns the
// calls, in the order the program makes them.
func (m *Model) build(p *prepared, sc Options, workspace func(schedule.ConvCall) int64) (*schedule.Program, []convCall, error) {
	s, err := m.infer(p.graph, sc)
	if err != nil {
		return nil, nil, err
	}
	var calls []convCall
	if sc.NoFlash && (sc.AMP || sc.Half) {
		for i := range p.graph.Nodes {
			if n := &p.graph.Nodes[i]; n.OpType == "ScaledDotProductAttention" && n.IntAttr("gqa", 0) != 0 {
				return nil, nil, fmt.Errorf("onnxmem: %s: node %s: grouped-query attention in half precision on a card without flash attention (compute capability below 8.0) runs PyTorch's math kernel on float32 copies, which onnxmem does not simulate: simulate it in float32 or on a card of sm 8.0 or newer", m.Name, n.Name)
			}
		}
	}
	cfg := schedule.Config{CuBLASWorkspace: sc.CuBLASWorkspace, CuBLASLtWorkspace: CuBLASLtWorkspace, Holder: p, NoFlash: sc.NoFlash,
		OffGraph: family.OffGraph(p.fam, outputsOf(p.graph, s)),
		Workspace: func(c schedule.ConvCall) int64 {
			ws := workspace(c)
			calls = append(calls, convCall{c, ws})
			return ws
		}}
	for _, r := range sc.Checkpoint {
		cfg.Checkpoint = append(cfg.Checkpoint, schedule.Range(r))
	}
	switch {
	case sc.AMP:
		cfg.Precision, cfg.BF16 = schedule.AMP, sc.AMPDType == "bfloat16"
	case sc.Half:
		cfg.Precision = schedule.Half
	}
	if sc.Segments > 1 {
		cfg.Checkpoint = schedule.Sequential(layers(p.graph), sc.Segments)
	}
	if sc.Eval {
		cfg.Eval = &schedule.Eval{Head: family.EvalHead(p.fam), Float: sc.EvalFloat}
	}
	if sc.Train {
		if err := family.CheckTrain(p.fam, outputsOf(p.graph, s), sc.Trainer); err != nil {
			return nil, nil, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
		}
		cfg.Train = family.Recipe(p.fam, p.graph, schedule.Optimizer(sc.Optimizer), sc.EMA, sc.Boxes)
		cfg.Train.PrevPredAlive = sc.PrevPredAlive
		if w := cfg.Train.CuBLASWorkspace; w > 0 { // the script's, on any card
			cfg.CuBLASWorkspace = w
		}
		if sc.BoxCounts != nil {
			cfg.Train.BoxCounts = sc.BoxCounts
			cfg.Train.Boxes = slices.Max(sc.BoxCounts)
		}
	}
	prog, err := schedule.Build(p.graph, s, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
	}
	prog.Harness = family.Harness(p.fam)
	return prog, calls, nil
}

// forScenario returns the model as the scenario's family prepares it: its
// Family field, else the detected one.
func (m *Model) forScenario(sc Options) (*prepared, error) {
	return m.prepare(cmp.Or(sc.Family, m.Family))
}

// Simulate predicts one scenario.
func (m *Model) Simulate(sc Options) (*Result, error) {
	p, err := m.program(sc)
	if err != nil {
		return nil, err
	}
	return Run(p, sc), nil
}

// Sweep predicts a scenario at each batch size; the results are in the
// order given. The batch sizes are simulated on up to GOMAXPROCS goroutines
// at once. progress, when not nil, is called after each one, from one
// goroutine at a time, with the number done so far. On errors it returns
// the one of the earliest batch size in the list.
func (m *Model) Sweep(sc Options, batches []int64, progress func(done, total int)) ([]*Result, error) {
	out := make([]*Result, len(batches))
	errs := make([]error, len(batches))
	var mu sync.Mutex
	done, next := 0, 0
	work := func() {
		for {
			mu.Lock()
			i := next
			next++
			mu.Unlock()
			if i >= len(batches) {
				return
			}
			s := sc
			s.Batch = batches[i]
			out[i], errs[i] = m.Simulate(s)
			mu.Lock()
			done++
			if progress != nil {
				progress(done, len(batches))
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(batches)) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// GPUMem is ReservedAfter as the detection training loops print it in
// their GPU_mem column: f'{torch.cuda.memory_reserved() / 1E9:.3g}G',
// decimal gigabytes with three significant digits ("23.1G").
func (r *Result) GPUMem() string { return gpuMem(r.ReservedAfter) }

// gpuMem writes reserved bytes as the training loops print them.
func gpuMem(n int64) string {
	return strconv.FormatFloat(float64(n)/1e9, 'g', 3, 64) + "G"
}

// Fits reports whether the step ran to its end within its scenario's
// Capacity: without running out of memory, the allocator's release of its
// cache and retry included. This is the one meaning of "fits" in onnxmem.
// A step simulated without a Capacity has no limit and fits.
func (r *Result) Fits() bool { return !r.OOM }

// Fit simulates sc without a limit, for its full figures, and reports
// whether it fits under capacity, the caching allocator's limit in bytes.
// It does when its reserved memory never exceeds capacity (the run under
// the limit is then the same run); it does not when the bytes it requests
// at once exceed capacity (no layout holds them); in between, the step is
// simulated under the limit, where releasing the cache may let it fit.
func (m *Model) Fit(sc Options, capacity int64) (*Result, bool, error) {
	sc.Capacity = 0
	r, err := m.Simulate(sc)
	if err != nil {
		return nil, false, err
	}
	switch {
	case capacity <= 0 || r.PeakReserved <= capacity:
		return r, true, nil // it never touches the limit (Run)
	case r.PeakRequested > capacity:
		return r, false, nil
	}
	sc.Capacity = capacity
	capped, err := m.Simulate(sc)
	if err != nil {
		return nil, false, err
	}
	return r, capped.Fits(), nil
}

// MaxBatch returns the largest batch size, at most limit, whose step fits
// (Result.Fits) under capacity, the caching allocator's limit in bytes (see
// Options.Capacity), with its Result; 0 and a nil Result when not even
// batch 1 fits. Each batch is simulated under the limit, so a step whose
// cache would grow past it but that fits after releasing the cache counts
// as fitting, as it runs in PyTorch.
//
// The memory grows with the batch size, almost on a line, so the search
// guesses and then gallops (interpolation search with exponential
// bracketing, as in Bentley and Yao 1976): batch 1 and 2 give the line of
// the allocated peak; the batch where it meets the limit, scaled by the
// allocated share of the reserved peak at batch 2, is tried; from there
// steps of 1, 2, 4, ... away from it bracket the answer, which bisection
// finishes. A step whose fitting is monotone in the batch gets the answer a
// binary search gives, in about 2 + 2·log2(the guess's error) simulations
// instead of log2(limit).
func (m *Model) MaxBatch(sc Options, capacity, limit int64) (int64, *Result, error) {
	if capacity <= 0 {
		return 0, nil, fmt.Errorf("onnxmem: max batch under a limit of %d bytes: the limit must be positive", capacity)
	}
	sc.Capacity = capacity
	if limit <= 0 || limit >= math.MaxInt64/2 {
		return 0, nil, fmt.Errorf("onnxmem: max batch up to %d: want a limit from 1 to %d", limit, int64(math.MaxInt64/2-1))
	}
	// lo fits (0 trivially) and hi does not (limit+1 by assumption).
	lo, hi := int64(0), limit+1
	var best *Result
	// The search places the segments top down; its answer is then checked
	// the other way too, as Run checks a step (below).
	probe := func(b int64) (*Result, bool, error) {
		sc.Batch = b
		r, err := simulatePlaced(m, sc, allocator.TopDown)
		var big *ErrTooLarge
		if errors.As(err, &big) {
			hi = b // beyond any limit: it does not fit
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if r.Fits() {
			lo, best = b, r
			return r, true, nil
		}
		hi = b
		return r, false, nil
	}
	// Batch 1 and 2, then the guess.
	var one *Result
	for b := int64(1); b <= 2 && b < hi; b++ {
		r, ok, err := probe(b)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			break // lo is the answer, checked below
		}
		if b == 1 {
			one = r
		}
	}
	if hi-lo > 1 {
		b := lo + 1
		if k := best.Peak - one.Peak; k > 0 {
			target := float64(capacity) * float64(best.Peak) / float64(max(best.PeakReserved, 1))
			b = min(max(2+int64((target-float64(best.Peak))/float64(k)), lo+1), hi-1)
		}
		_, ok, err := probe(b)
		if err != nil {
			return 0, nil, err
		}
		// Gallop away from the guess until the answer is bracketed.
		for step := int64(1); hi-lo > 1; step *= 2 {
			next := hi - step
			if ok {
				next = lo + step
			}
			if next <= lo || next >= hi {
				break
			}
			if _, ok2, err := probe(next); err != nil {
				return 0, nil, err
			} else if ok2 != ok {
				break
			}
		}
	}
	for hi-lo > 1 {
		if _, _, err := probe(lo + (hi-lo)/2); err != nil {
			return 0, nil, err
		}
	}
	// The largest batch that fits placed top down must fit placed bottom
	// up too where it is at the limit (Run); where it does not, the batch
	// below is the candidate.
	for ; lo > 0; lo-- {
		sc.Batch = lo
		var err error
		if best == nil || best.Scenario.Batch != lo {
			if best, err = simulatePlaced(m, sc, allocator.TopDown); err != nil {
				return 0, nil, err
			}
		}
		up := best // placed bottom up, where that can differ (Run)
		if atLimit(sc, best) {
			if up, err = simulatePlaced(m, sc, allocator.BottomUp); err != nil {
				return 0, nil, err
			}
		}
		if best.Fits() && up.Fits() {
			return lo, best, nil
		}
	}
	return 0, nil, nil
}

// simulatePlaced is m.Simulate with the segments placed as place says
// only.
func simulatePlaced(m *Model, sc Options, place allocator.Placement) (*Result, error) {
	p, err := m.program(sc)
	if err != nil {
		return nil, err
	}
	return runPlaced(p, sc, place), nil
}

// Layers returns the number of top-level layers of the detected family's
// graph: one more than the largest layer index.
func (m *Model) Layers() int { return layers(m.Graph) }

// layers returns one more than the largest layer index of g's nodes.
func layers(g *ir.Graph) int {
	n := 0
	for i := range g.Nodes {
		n = max(n, g.Nodes[i].Layer+1)
	}
	return n
}

// Parameters returns the number of trainable parameters: the elements of the
// weights that get a .grad in a training step (convolution weights and
// biases, batch normalization's scale and bias), without the running
// statistics, auxiliary branch included. PyTorch's sum(p.numel() for p in
// model.parameters()) also counts frozen weights, which the training graph
// shows as constants (a detection head's fixed bin weights, say).
func (m *Model) Parameters() (int64, error) {
	p, err := m.Program(Options{Batch: 1, Height: 64, Width: 64})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, b := range p.ParamGrads {
		n += p.Buffers[b].Bytes / 4 // fp32 gradients
	}
	return n, nil
}

// Footprint is what a model holds on the device once it is loaded
// (model.to('cuda')), before any step, as PyTorch reports it.
type Footprint struct {
	// Params is sum(p.numel() for p in model.parameters()), frozen ones
	// included; ParamBytes their bytes.
	Params, ParamBytes int64
	// BufferBytes is the bytes of model.buffers(): batch norms' running
	// statistics and their num_batches_tracked (an int64 each), and
	// integer index buffers (a relative position index).
	BufferBytes int64
	// Allocated is torch.cuda.memory_allocated() after the move: every
	// tensor in a block of its own, its size rounded up by the caching
	// allocator.
	Allocated int64
}

// Footprint returns what the model holds on the device once loaded: the
// graph's initializers in the order the exporters list them (the
// state_dict's), each batch norm's num_batches_tracked, and what the
// family knows the graph does not show (a detection head's fixed weights
// and its stride tensor, say), each moved to the device as PyTorch's
// Module._apply moves them, one allocation a tensor. Of the scenario it
// reads only Family and AllocConf; the other fields are ignored (a text
// model's graph is bound at a sequence of 8 tokens, which holds the same
// tensors).
func (m *Model) Footprint(sc Options) (*Footprint, error) {
	conf, err := sc.allocConfig()
	if err != nil {
		return nil, err
	}
	h, w := int64(64), int64(64)
	if fh, fw, ok := m.FixedImage(); ok {
		h, w = fh, fw // a fixed input size, such as a ViT's
	}
	var seq int64
	for _, v := range m.Graph.Inputs {
		if d := m.Graph.Values[v].DType; d == ir.Int64 || d == ir.Int32 {
			seq = 8 // token ids
		}
	}
	p, err := m.Program(Options{Batch: 1, Height: h, Width: w, Seq: seq, Family: sc.Family})
	if err != nil {
		return nil, err
	}
	a := allocator.NewWithConfig(conf)
	var f Footprint
	for i, b := range p.Resident {
		if p.ResidentRoles[i] != schedule.RoleModel {
			continue
		}
		buf := p.Buffers[b]
		a.Malloc(buf.Bytes)
		if k := p.ResidentOff[i]; k > 0 {
			switch u := p.OffGraph[k-1]; {
			case u.Param:
				f.ParamBytes += u.Bytes
				f.Params += u.Elems
			case u.Buffer:
				f.BufferBytes += u.Bytes
			}
			continue
		}
		if p.ResidentBuffer[i] || !p.Graph.Values[buf.Value].DType.IsFloat() {
			f.BufferBytes += buf.Bytes
			continue
		}
		f.ParamBytes += buf.Bytes
		f.Params += p.Buffers[b].Bytes / int64(p.Graph.Values[buf.Value].DType.Size())
	}
	f.Allocated = a.Stats().Allocated
	return &f, nil
}

// Sequential returns the layer ranges that
// torch.utils.checkpoint.checkpoint_sequential checkpoints when it cuts n
// layers into k segments: size = n / k, and the first k-1 chunks of size
// layers each; the rest runs normally. k < 2 checkpoints nothing.
func Sequential(n, k int) []Range { return ranges(schedule.Sequential(n, k)) }

// EachLayer returns a plan that checkpoints every one of n top-level layers
// on its own, the most memory-frugal plan and the most recompute.
func EachLayer(n int) []Range { return ranges(schedule.EachLayer(n)) }

// ranges converts schedule's ranges to the public type.
func ranges(rs []schedule.Range) []Range {
	out := make([]Range, len(rs))
	for i, r := range rs {
		out[i] = Range(r)
	}
	return out
}

// Classes returns the number of classes that the model predicts, as its
// family reads them from the graph's outputs at batch 1 and 640×640
// (family.Family.Classes), or 0 when its family reads none (the generic
// family).
func (m *Model) Classes() (int64, error) {
	p, err := m.prepare(m.Family)
	if err != nil {
		return 0, err
	}
	s, err := p.graph.Infer(ir.Binding{Batch: 1, Height: 640, Width: 640})
	if err != nil {
		return 0, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
	}
	return family.Classes(p.fam, outputsOf(p.graph, s)), nil
}

// outputsOf returns the dims and types of g's outputs in shapes s.
func outputsOf(g *ir.Graph, s *ir.Shapes) []schedule.Output {
	outs := make([]schedule.Output, len(g.Outputs))
	for i, v := range g.Outputs {
		outs[i] = schedule.Output{Dims: s.Dims[v], DType: s.DTypes[v]}
	}
	return outs
}

// As returns the model as the named family prepares it: its Family and
// Graph are that family's. It shares the loaded graph and its caches with m.
func (m *Model) As(family string) (*Model, error) {
	p, err := m.prepare(family)
	if err != nil {
		return nil, err
	}
	return &Model{Name: m.Name, Family: p.fam.Name(), Graph: p.graph, Note: m.Note, Builtin: m.Builtin, raw: m.raw, cache: m.cache}, nil
}

// FixedImage returns the image size that the export fixed, when its
// input's height and width are numbers rather than symbols (a torchvision
// export made with only the batch dynamic: 224×224), and whether it did.
func (m *Model) FixedImage() (h, w int64, ok bool) {
	// The image is the first input of rank 4, as ir.Binding binds it.
	for _, in := range m.Graph.Inputs {
		if d := m.Graph.Values[in].Dims; len(d) == 4 {
			if d[2].Param == "" && d[3].Param == "" && d[2].Value > 0 && d[3].Value > 0 {
				return d[2].Value, d[3].Value, true
			}
			break
		}
	}
	return 0, 0, false
}

// infer infers g's shapes at sc's batch and image size. When they do not
// infer but the image rounded up to a multiple of a power of two does (a
// network whose feature maps of several strides meet, such as a detection
// neck, needs sides that are multiples of its largest stride), the error
// names that multiple, the smallest whose next two multiples both infer,
// and the nearest size that works, the way training
// scripts round an image size up (⌈650/32⌉·32 = 672 for a stride of 32).
func (m *Model) infer(g *ir.Graph, sc Options) (*ir.Shapes, error) {
	b := ir.Binding{Batch: sc.Batch, Height: sc.Height, Width: sc.Width, Seq: sc.Seq}
	s, err := g.Infer(b)
	if err == nil {
		return s, nil
	}
	if h, w, ok := m.FixedImage(); ok && (h != b.Height || w != b.Width) && inferOK(g, ir.Binding{Batch: b.Batch, Height: h, Width: w}) {
		return nil, fmt.Errorf("onnxmem: %s: image %d×%d: the export fixes its input at %d×%d (a position embedding or a reshape follows from it): give %d×%d, or export with dynamic height and width (%w)",
			m.Name, b.Height, b.Width, h, w, h, w, err)
	}
	for mult := int64(2); mult <= 256; mult *= 2 {
		r := b
		r.Height, r.Width = roundUp(b.Height, mult), roundUp(b.Width, mult)
		if r == b {
			continue
		}
		next := r
		next.Height, next.Width = r.Height+mult, r.Width+mult
		if inferOK(g, r) && inferOK(g, next) {
			return nil, fmt.Errorf("onnxmem: %s: image %d×%d: the network needs sides that are multiples of %d: give %d×%d, the next size that is (%w)",
				m.Name, b.Height, b.Width, mult, r.Height, r.Width, err)
		}
	}
	return nil, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
}

// inferOK reports whether g's shapes infer at b.
func inferOK(g *ir.Graph, b ir.Binding) bool {
	_, err := g.Infer(b)
	return err == nil
}

// roundUp returns n rounded up to a multiple of m.
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// Input is one input of a model's graph, as a command line binds it by
// name (-input): its declared dims (0 where symbolic) and whether it
// holds integers (token ids) rather than floats.
type Input struct {
	Name string
	Dims []int64
	Ints bool
}

// Inputs returns the inputs of graph g in order.
func Inputs(g *ir.Graph) []Input {
	var out []Input
	for _, v := range g.Inputs {
		val := &g.Values[v]
		in := Input{Name: val.Name, Ints: !val.DType.IsFloat()}
		for _, d := range val.Dims {
			if d.Param != "" {
				in.Dims = append(in.Dims, 0)
			} else {
				in.Dims = append(in.Dims, d.Value)
			}
		}
		out = append(out, in)
	}
	return out
}
