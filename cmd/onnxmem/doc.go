// Command onnxmem predicts the GPU memory of training a network from its
// exported ONNX graph: the figures that torch.cuda.memory_stats() reports,
// where the peak falls and which tensors make it.
//
// For a YOLOv9 model, what it simulates by default is the training run as
// train_dual.py (train.py for GELAN) runs it with its own defaults, in one
// process: AMP, SGD, the EMA, GradScaler, gradient clipping,
// hyp.scratch-high.yaml's mosaic and mixup, two epochs of the dataset of
// -data (or the built-in COCO-like one, onnxmem.BuiltinData), each
// validated at twice the batch on the dataloader's rectangles and saved.
// report, maxbatch and run answer for that whole run and give one largest
// batch; knobs, sweep, timeline, explain and plan simulate the step of its
// densest iteration (the one whose densest image carries the most boxes).
// -step names another: run, train (one iteration with -boxes boxes an
// image), eval or model.
//
// The step it simulates is otherwise one of three. The model step of package
// onnxmem: the parameters and the input batch are resident, the forward runs
// in train mode, the loss is sum(o.sum()) over the outputs, and the backward
// follows. The train step, with -train: one step of YOLOv9's train_dual.py
// in steady state (the batch's upload, the forward, YOLOv9's task-aligned
// loss modelled op by op in package family/yolov9/loss, the backward,
// GradScaler, gradient clipping, the optimizer step and the EMA update),
// taken by report, knobs, maxbatch, plan, explain and diff. The eval step,
// with -eval: validation as train_dual.py runs it at an epoch's end (a half
// copy of the model under no_grad, with the head's decode), taken by sweep,
// timeline, maxbatch and explain. A step runs in fp32, under AMP
// (torch.autocast float16, the default of train_dual.py) or in half
// precision (model.half()), with or without checkpoint segments
// (torch.utils.checkpoint.checkpoint_sequential with N segments: the first
// N-1 run under checkpoint(use_reentrant=False)). report compares fp32 and
// AMP with 0, 2 and 4 segments, knobs every precision with 0, 2 and 4
// segments; sweep, timeline, maxbatch, explain, plan, diff and run take
// -amp, -half and -segments, and -checkpoint, the ranges of layers that
// plan prints. run simulates a whole training run, and predict takes each
// of these from JSON lines.
//
// "Fits" has one meaning in every command (report, knobs and maxbatch) and
// in the library (onnxmem.Result.Fits, onnxmem.Model.Fit,
// onnxmem.Model.MaxBatch): a step fits when it runs to its end under the
// caching allocator's limit without running out of memory, as PyTorch runs
// it. A request that would push the reserved memory past the limit first
// makes the allocator release its cached segments that hold no live block
// and retry; only when that fails does the step raise
// torch.OutOfMemoryError. A step can therefore fit although, run without a
// limit, it would reserve more than the limit. The limit
// (onnxmem.Scenario.Capacity) is what
// torch.cuda.set_per_process_memory_fraction(f) sets, f × total_memory:
// -budget GiB (80 when neither flag is given), or with -device the card's
// usable memory.
//
// Device profiles (onnxmem devices) give common cards' memory as PyTorch
// reports it, less the CUDA context (an assumption of 512 MiB): the memory
// usable by PyTorch's caching allocator (onnxmem.Device.Usable), its limit on
// the card. -device takes a profile's name, case ignored, or a card's total
// memory as PyTorch reports it, a number and a unit, decimal (24GB, 24000MB)
// or binary (23.5GiB, 24000MiB), optionally followed by +ctx=SIZE, its CUDA
// context (24GB+ctx=600MiB); without it the context is assumed to be 512 MiB
// (onnxmem.ParseDevice). A step on a device also keeps the device's cuBLAS
// workspace (onnxmem.Scenario.Device); a card given by its size has
// PyTorch's Hopper default, 32 MiB.
//
// Every command that reads a model detects its model family from the graph's
// names (a YOLOv9 export names its nodes "/model.i/..."; any other graph is
// simulated by the generic family, with the sum of its outputs as the loss)
// and takes -family NAME to choose another.
//
// Usage:
//
//	onnxmem [COMMAND [flags] [MODEL.onnx]]
//
// MODEL.onnx is an ONNX file or, where no file has that name, the name of a
// built-in model (package family/yolov9/models: yolov9-t, -s, -m, -c, -e and gelan-t, -s,
// -m, -c, -e; onnxmem models lists them). A built-in model is the graph of
// its training-mode export, so it predicts what the export does, and needs
// no file. An inference export (export.py's: batch norms folded, RepConvN
// fused) holds no training graph; the built-in model with the same
// convolutions and classes stands for it, and stderr says which
// (onnxmem.Model.Builtin, the model that stands for it). Every command that reads a model takes -nc N, the
// classes of a built-in model's head (a dataset's nc; the model is then
// named "yolov9-c nc=20"), and -family. With no arguments onnxmem runs report on the built-in yolov9-c
// (the first of onnxmem.Builtins). Flags may come
// before or after MODEL.onnx; "--" ends the flags. Every command takes -h,
// which prints its syntax, an example and its flags to stdout.
//
// Three figures come out of a step. "peak" is what
// torch.cuda.max_memory_allocated() reports: the bytes of live tensors at
// their most. "reserved" is what torch.cuda.max_memory_reserved() reports:
// the caching allocator's segments at their most. GPU_mem is what YOLOv9's
// training loop prints in its GPU_mem column,
// f'{torch.cuda.memory_reserved() / 1E9:.3g}G': the segments still reserved
// when the step ends, in decimal gigabytes (onnxmem.Result.GPUMem). Without
// a limit nothing is released during a step, so GPU_mem is the reserved
// peak in other units; under a limit it can be less, when the allocator
// released its cache to retry a request.
//
// Tables print sizes in GiB with two decimals; -json prints bytes, and -csv
// a table's rows in bytes (every command with a table takes it). Output is
// deterministic. Errors go to stderr, prefixed "onnxmem: ". The exit code is
// 0 on success, 1 on a failure (a model that cannot be read or simulated, a
// file that cannot be written) and 2 on a usage error (an unknown command or
// flag, a bad flag value, a wrong number of arguments).
//
// # report
//
//	onnxmem report [-batch N] [-img N] [-step run|train|model] [-data FILE.yaml] [-epochs E] [-seed S] [-workers N] [-close-mosaic N] [-device NAME|SIZE] [-batches LIST]
//	    [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-v] [MODEL.onnx]
//
// By default, for a YOLOv9 model, the whole training run at -batch (16):
// GPU_mem over its iterations (median, 99th percentile, largest), where
// its allocated peak falls, validation's peak, the largest batch whose run
// completes on the cards rtx4090, a100-40 and a100-80, or -device's alone
// (the same search as maxbatch's), and the step of its densest iteration explained; -svg plots
// that step's peak against the batch size (-batches) in fp32 and AMP with
// 0, 2 and 4 segments, on a log-2 axis with the cards' limits. With -step model (or train, or -train) it predicts
// the model step, or the full training step of train_dual.py (flags as
// for maxbatch), at each batch size of -batches in six settings: fp32 and
// AMP, each without checkpointing and with 2 and 4 segments (columns "fp32",
// "fp32 k2", "fp32 k4", "amp", "amp k2", "amp k4"), and prints:
//
//   - peak GiB: the peak of each setting at each batch size;
//   - largest batch that fits: for each setting, the largest batch size, up
//     to 1024, that fits the device profiles rtx4090, a100-40 and a100-80
//     ("1024+" when the search stops at the limit): the step runs to its end
//     with the caching allocator limited to the card's usable memory, its
//     total less the CUDA context, assumed to be 512 MiB (see devices),
//     releasing its cache and retrying before it runs out of memory. The
//     table gives each card's usable GiB;
//   - where the peak is at -batch with AMP and no checkpointing,
//     train_dual.py's default: phase, event, node and layer; the 10 largest
//     tensors alive at the peak; and the live bytes by kind of buffer.
//
// The searches use onnxmem.Model.MaxBatch, which simulates each batch
// size under the card's limit. Each one's limit is one below the smallest
// batch size of -batches whose peak requested exceeds the card's usable
// memory (1024 when none does), since no layout of the allocator holds the
// bytes such a step requests at its peak: the memory grows with the batch
// size, and a model step keeps no cuBLAS workspace resident, so the device's
// workspace does not change it; that gives the answer of a search up to 1024
// in fewer simulations. The simulations run on all CPUs; on yolov9-c
// with the default batch sizes the report takes about half a second on two
// cores.
//
// Without MODEL.onnx, report uses the built-in yolov9-c: no file is read.
//
//	-img N         input image size in pixels: a side, or HxW such as 384x640 (default 640)
//	-seq N         a text model's sequence length: its token ids' dim 1 (required for one)
//	-batches LIST  comma-separated batch sizes (default 1,2,4,8,16,32,64)
//	-batch N       batch size whose AMP peak is explained in detail (default 16)
//	-json          write JSON instead of the tables: model, path, builtin
//	               (path names a built-in model), devices (name, model,
//	               total, context, usable, cublas_workspace, in bytes),
//	               max_batch_limit (1024), settings (each with
//	               name, amp, segments, results and max_batch, one per
//	               device) and detail (with at_peak and peak_by_kind)
//	-v             progress on stderr, one line per simulated setting and
//	               batch size ("amp k2 at batch 8") and per search ("amp k2
//	               on rtx4090"), in the order they finish
//
// # sweep
//
//	onnxmem sweep [-img N] [-batches LIST] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-v] MODEL.onnx
//
// Predicts the step at each batch size and prints a table: batch, peak, peak
// requested (before the allocator's rounding), peak reserved, after forward,
// after backward, and the phase, layer and node of the peak.
//
//	-img N         input image size in pixels: a side, or HxW such as 384x640 (default 640)
//	-seq N         a text model's sequence length: its token ids' dim 1 (required for one)
//	-batches LIST  comma-separated batch sizes (default 1,2,4,8,16,32,64)
//	-json          write {"model", "results": [...]} instead, in bytes
//	-svg FILE      also write a plot of the peak against the batch size
//	-v             progress on stderr
//
// # timeline
//
//	onnxmem timeline [-batch N] [-img N] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-snapshot FILE.pickle] MODEL.onnx
//
// Replays the measured step and prints a summary: allocated memory before
// the step (m0), after the forward, the forward's peak, the step's peak and
// where it falls, the peak requested and reserved, after the backward, and
// the events of each phase (forward, loss, backward, cleanup).
//
//	-batch N   batch size (default 8)
//	-img N     input image size in pixels: a side, or HxW such as 384x640 (default 640)
//	-json      write {"model", "result", "phases", "samples"} instead: the
//	           allocator's allocated, requested and reserved bytes after
//	           every event of the step
//	-svg FILE  also write a plot of allocated and reserved memory against the
//	           event index, the phases shaded and divided by dashed lines and
//	           the peak marked
//
// # predict
//
//	onnxmem predict [-root DIR] [-sequence] < SCENARIOS.jsonl
//
// The interface for accuracy checks. Reads JSON Lines on stdin, one scenario
// an object, with the fields of the ground truth's calibration.jsonl: model
// (a path relative to -root), kind, batch, img (the square side), amp,
// segments and, for train steps, boxes_per_img, optimizer and ema; and
// optionally family, the model family to simulate the model as (yolov9 or
// generic; by default the family detected from the graph). For each
// line it writes one line to stdout, at once: the same object with a field
// "predicted" added,
//
//	{"peak", "peak_req", "peak_reserved", "m0", "after_fwd", "fwd_peak", "after_bwd"}
//
// in bytes, or with a field "error" (a message starting "onnxmem: ") when the
// scenario cannot be simulated: a scenario that onnxmem.Scenario.Check
// refuses (a negative segments, an unknown family or optimizer), a
// model file that cannot be loaded, a missing or mistyped field. model_step
// lines with amp true or segments above 1 are predicted; eval_step lines
// ignore amp and segments, since validation always runs a half copy without
// gradients; train_step lines need boxes_per_img and default to SGD without
// EMA.
// Nothing is skipped and nothing is guessed. kind, model, batch and img are
// required; a missing amp means false and a missing segments 0. Each model
// file is loaded once. Each line is answered as a fresh process would run
// it, whatever came before; -sequence, a measuring harness's mode, runs a
// model's consecutive model_step lines one after another in one process.
//
// A train_run line simulates a whole training run (onnxmem.Model.Run):
// the training scenario (batch, img or img_h and img_w, amp, segments,
// optimizer, ema, trainer, nc) and "events", a list of {"setup": {}},
// {"train": {"boxes_per_img": [3, 0, 12, ...]}} (one count per image, or
// one number for all; "skipped": true for an iteration whose optimizer
// step GradScaler skipped, as it does in AMP's first iterations), {"val": {"batch", "img_h", "img_w",
// "boxes_per_img"}} (one validation batch) and {"ckpt": {}}. It answers
//
//	{"peak", "peak_reserved", "reserved_after": [...], "allocated_after": [...], "event_peak": [...], "gpu_mem": [...]}
//
// with one value per event (reserved_after of a train event, over 1e9, is
// the GPU_mem the training loop prints) and the peaks over the run. With
// "gpus": N the run is DistributedDataParallel's over N GPUs ("batch" the
// total, "sync_bn" its --sync-bn): the answer is rank 0's, with the other
// ranks' under "other_ranks", or with "rank": R that rank's alone.
//
// All other fields pass through with their exact text (numbers are not
// reformatted), compacted, with the object's keys in sorted order. An input
// "predicted" or "error" is replaced. Blank lines are skipped. A line that is
// not a JSON object gives {"error", "line", "raw"}: the message, the line's
// number (counting blank lines) and its text. Per-line errors are data: the
// exit code is 0 unless stdin cannot be read or stdout written.
//
//	-root DIR  directory the scenarios' model paths are relative to
//	           (default "."); for the ground truth, the shared folder
//
// # run
//
//	onnxmem run [-batch N] [-img N] [-amp] [-segments K] [-optimizer NAME] [-ema=false] [-alloc-conf OPTS]
//	            [-epochs E] [-iters N] [-val-images N] [-mean-boxes M] [-data FILE.yaml] [-seed S] [-events FILE.json]
//	            [-workers N] [-close-mosaic N] [-gpus N [-sync-bn]] [-device NAME|SIZE] [-json|-csv] [-svg FILE] [MODEL.onnx]
//
// A whole training run in one process (onnxmem.Model.Run): the setup, then
// per epoch -iters iterations whose images hold box counts drawn from a
// long-tailed distribution of mean -mean-boxes (seeded by -seed), the
// validation of -val-images images at twice the batch in the rectangular
// shapes the family's validation gives common aspect ratios, and the
// checkpoint save; under -amp the first three iterations' optimizer steps
// are GradScaler's skipped ones, so the optimizer's state comes with the
// fourth. -data FILE.yaml, the YOLO data file train_dual.py's --data
// takes, trains on that dataset: each epoch every training image once,
// each batch's images and boxes as the official dataloader gives them, its
// shuffle, load_mosaic, random_perspective and mixup draws reproduced
// (family/yolov9/dataset's Loader; -workers and -close-mosaic set the
// loader as train_dual.py's --workers and --close-mosaic do, and no seed
// changes it; over -gpus the boxes are drawn from -seed instead; -iters,
// if set, the first so many iterations),
// the validation on the val images' rectangular batches exactly as
// LoadImagesAndLabels(rect=True, pad=0.5) shapes them, and the head's
// classes from the file's nc. -events reads the events from a file instead, in predict's
// train_run format ("skipped": true marks the iterations GradScaler
// skipped, if known). It prints allocated and reserved memory after
// each event with GPU_mem as the loop prints it, and the peaks over the
// run; with -device, whether the run fits under the card's limit (it runs
// to its end without running out of memory). -json writes the same with
// predict's train_run fields and where the box counts came from (source).
// -svg plots memory against the event index: reserved (GPU_mem) and
// allocated after each event, each event's allocated peak, the card's
// limit with -device, validations shaded and checkpoint saves marked.
//
// -gpus N runs the training as python -m torch.distributed.run
// --nproc_per_node N train_dual.py --batch B does (internal/sim/ddp.go):
// N ranks of DistributedDataParallel, each training B/N images an
// iteration (B must be a multiple of N) from its share of every epoch
// (DistributedSampler), with DDP's gradient bucket (a copy of every
// gradient, rebuilt after the first iteration), the broadcasts'
// temporaries and the first iteration's output clones; rank 0 alone keeps
// the EMA, validates at 2B/N and saves. The events printed are rank 0's; a
// table gives each rank's peaks and largest GPU_mem, and each card's limit
// is its usable memory less NCCL's share (564 MiB a process, measured with
// one GPU; its buffers for the peers of several GPUs are not counted).
// -gpus 1 is DDP on one GPU, as torch.distributed.run with one process
// runs it; -sync-bn, train_dual.py's --sync-bn, is plain batch norm there
// (measured), and over several GPUs makes batch norm's tensors but for its
// statistics' few hundred bytes a layer (from PyTorch's source, not yet
// measured). -json adds gpus, nccl_bytes and ranks.
//
// # claims
//
//	onnxmem claims [-model NAME] [-batch N] [-img N] [-boxes N] [-device NAME] [-json|-csv]
//
// A popular article's claims about training YOLOv9 at batch 64 without
// running out of memory, each checked against the simulation of
// train_dual.py on a built-in model (package family/yolov9/claims): the
// figures onnxmem computes and the verdict (true, false, partly) that
// follows from them.
//
// # diff
//
//	onnxmem diff [-batch N] [-img N] [-amp|-half] [-segments K] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] SNAPSHOT.pickle MODEL.onnx
//
// A memory snapshot taken on the GPU (torch.cuda.memory._dump_snapshot()
// after torch.cuda.memory._record_memory_history() was enabled just before
// the measured step) against the simulated step, allocation by allocation:
// how many allocs and frees agree in size and place, where the two traces
// first part (the snapshot's frame and the ONNX node the simulation was
// running there), and the requested peak each reaches above its start.
//
// # plan
//
//	onnxmem plan [-batch N] [-img N] [-budget GiB | -device NAME|SIZE] [-step run|train|model] [-data FILE.yaml] [-amp|-half] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]
//	    [-alloc-conf OPTS] [-json|-csv] MODEL.onnx
//
// The checkpoint plan with the fewest recomputed FLOPs that it finds for
// the step to fit under the limit (onnxmem.Model.Plan: the usual
// recipes as the start, then a descent that takes layers out while the step
// fits), the best checkpoint_sequential that fits for comparison, and the
// plan as -checkpoint takes it. A limit that no plan meets is an error that
// says the lowest peak reachable. -json writes {"plan": [[first, last],
// ...], "checkpoint", "peak", "peak_reserved", "recompute_flops",
// "forward_flops", "fits", "limit_bytes", "best_sequential"}.
//
// Every command that takes -segments also takes -checkpoint 0-5,9-12
// (inclusive ranges of top-level layers), and predict's model_step and
// train_step lines take "checkpoint": [[0, 5], [9, 12]].
//
// # explain
//
//	onnxmem explain [-batch N] [-img N] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]
//	    [-alloc-conf OPTS] [-json|-csv] MODEL.onnx
//
// What makes the peak (onnxmem.Model.Explain): the bytes alive at it by
// kind (onnxmem.KindBytes: parameters, the EMA or half copy, optimizer
// state, gradients, activations, activation gradients, autocast copies,
// kernel copies, loss tensors, workspaces, the input, the loop's tensors,
// and the allocator's slack, what blocks that it did not split hold beyond
// their requests), which sum to the peak; the same by top-level layer, which
// also sum to it; and the largest tensors with the op that made each. -json
// writes {"peak", "by_kind": {kind: bytes}, "by_layer": [{"layer", "name",
// "bytes", "count"}], "largest": [...], "result"}.
//
// # maxbatch
//
//	onnxmem maxbatch [-img N] [-budget GiB | -device NAME] [-step run|train|eval|model] [-limit N | -for-batch N] [-amp|-half] [-segments K] [-eval [-eval-float]] [-alloc-conf OPTS]
//	    [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]
//	    [-data FILE.yaml [-epochs E] [-iters N] [-seed S] [-workers N] [-close-mosaic N]] [-gpus N [-sync-bn]] [-json|-csv] MODEL.onnx
//
// By default, for a YOLOv9 model, finds the largest batch whose whole
// training run completes (as with -data, on the built-in COCO-like data
// without it); with -gpus N, the largest total batch, a multiple of N,
// with which every rank of the DistributedDataParallel run completes (see
// run). With -step model, train or eval, -train, -eval or -half it
// finds the largest batch size, at most -limit, whose step fits, by binary
// search; 0 when not even batch 1 fits. The step is the model step (fp32
// unless -amp or -half, checkpointed with -segments), with -train a full
// training step of train_dual.py, or with -eval the validation step that
// train_dual.py runs at an epoch's end (a half copy of the model, or with
// -eval-float a float32 one, under no_grad; it runs at twice the training
// batch, so the largest training batch whose validation fits is half the
// answer). It fits when it runs to its end under the
// caching allocator's limit without running out of memory, the allocator's
// release of its cache and retry included (onnxmem.Model.MaxBatch, which
// simulates each batch size under the limit). The limit is:
//
//   - -device NAME: the card's usable memory, its total less the CUDA
//     context, and the step keeps the device's cuBLAS workspace
//     (onnxmem.Model.MaxBatch). The output names the device with its
//     total, CUDA context and usable GiB.
//   - -budget GiB (80 when neither is given): the budget, as
//     torch.cuda.set_per_process_memory_fraction sets it.
//
// -device and -budget exclude each other. The answer gives the step's
// reserved and allocated peaks: "max batch B: reserves R GiB of U GiB
// usable on CARD (GPU_mem G), peak P GiB allocated (where)". When not even
// batch 1 fits, it says so: "max batch 0: not even batch 1 fits in …".
//
// With -data FILE.yaml it finds the largest batch with which the whole
// training run on that YOLO dataset completes, as run -data simulates it
// (the setup, -epochs epochs (2, as run) of the training images with their drawn box
// counts, each epoch's validation and checkpoint save, AMP unless
// -amp=false): doubling from batch 1 to one that runs out of memory, then
// bisecting. The runs take the dataloader's own boxes (-workers,
// -close-mosaic; drawn from -seed over -gpus), so run -data at the answer
// completes and at one more does not. JSON: {"model", "data", "epochs",
// "iterations", "seed" (a drawn run's) or "workers", "device" or "budget",
// "limit", "max_batch", "peak", "peak_reserved", "next_oom_event"}.
//
// With -for-batch N maxbatch answers another question: the fewest checkpoint
// segments with which batch N fits. It tries 0 (no checkpointing), 2, 3, 4,
// 6, 8, 12, 16, 24, … (powers of two and one and a half times them) up to the
// number of top-level layers, and that number itself, with the other
// settings as given, and prints the first that fits with its reserved and
// allocated peaks; when none does, it says so ("batch 128 does not fit in
// 23.15 GiB usable on rtx4090 with any of 0, 2, …") and gives the closest,
// the count whose step would reserve the least without a limit, with its
// reserved and allocated peaks. -segments and -limit do not apply with it.
//
//	-img N          input image size in pixels: a side, or HxW such as 384x640 (default 640)
//	-budget GiB     the caching allocator's limit in GiB, decimals allowed,
//	                as set_per_process_memory_fraction sets it (default 80)
//	-device NAME    the card: a device profile's name (see devices), case
//	                ignored, or its total memory such as 24GB or 23.5GiB,
//	                optionally +ctx=600MiB for its CUDA context
//	-limit N        largest batch size to consider (default 1024)
//	-for-batch N    the fewest segments with which batch N fits, N at least 1
//	-amp, -half     autocast to float16, or model.half(); they exclude each
//	                other
//	-segments K     checkpoint_sequential with K segments (default 0: none)
//	-train          a full training step of train_dual.py; -half does not
//	                apply
//	-boxes N        with -train: ground-truth boxes in each image (default 16)
//	-optimizer NAME with -train: SGD, Adam, AdamW (with amsgrad where YOLOv9
//	                creates it), Lion or none, case ignored (default SGD)
//	-ema            with -train: update an EMA copy of the model (default
//	                true; -ema=false for none)
//	-json           write {"model", "budget" or "device", "limit",
//	                "max_batch", "result"}; with -for-batch {"model", "budget"
//	                or "device", "batch", "segments" (null when none fits),
//	                "result", "tried" (segments, peak, peak_reserved and fits
//	                of each count tried, up to the first that fits)}. A
//	                result of a train step has "train": {"boxes",
//	                "optimizer", "ema"}.
//
// -boxes, -optimizer and -ema without -train are usage errors.
//
// # devices
//
//	onnxmem devices [-json|-csv]
//
// Lists the device profiles (onnxmem.Devices), in their order: name, total
// GiB (what torch.cuda.get_device_properties reports as total_memory), the
// CUDA context GiB assumed, the usable GiB (total less context), PyTorch's
// default cuBLAS workspace in MiB and the card's model name; under the table,
// each profile's sources: where each figure comes from, or that it is an
// assumption. It reads no model.
//
//	-json  write {"devices": [...]}, each with name, model, total, context,
//	       usable, cublas_workspace (bytes) and sources
//
// # knobs
//
//	onnxmem knobs [-batch N] [-img N] [-budget GiB | -device NAME] [-step run|train|model] [-data FILE.yaml] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] MODEL.onnx
//
// What each knob buys at one batch size: the step in fp32, amp and half,
// each with 0, 2 and 4 checkpoint segments, in that order (fp32 first, the
// reference). With -train (and its -boxes, -optimizer and -ema, as for
// maxbatch) the step is train_dual.py's full step, in fp32 and amp only.
// One row each:
//
//	precision     fp32, amp or half
//	segments      0 (no checkpointing), 2 or 4
//	peak GiB      the predicted peak allocated
//	reserved GiB  the caching allocator's segments at the peak, simulated
//	              without a limit
//	saving        the bytes less than fp32 without checkpointing, in % and
//	              GiB
//	fits          whether the step fits: it runs to its end under the
//	              caching allocator's limit, -budget GiB or the usable
//	              memory of the card of -device, without running out of
//	              memory (the allocator releases its cache and retries
//	              first), so a step whose reserved GiB exceeds the limit may
//	              still fit (onnxmem.Model.Fit)
//	recompute     the extra FLOPs of recomputing the checkpointed layers in
//	              the backward, relative to the step's forward and backward
//	              FLOPs (onnxmem.Cost.Overhead); "-" without checkpointing
//	peak at       where the peak falls: phase (forward, backward,
//	              recompute, …) and top-level layer
//
// A line above the table gives the step's forward and backward FLOPs, which
// the precision does not change. FLOPs are counted from the graph
// (onnxmem.Model.Cost: a multiply-add is 2 FLOPs; the backward is twice the
// forward of the ops that need gradients; the recomputation counts the whole
// checkpointed ranges, an upper bound by the few trailing ops that PyTorch's
// early stop skips).
//
//	-batch N      batch size (default 64)
//	-img N        input image size in pixels: a side, or HxW such as 384x640 (default 640)
//	-budget GiB   the caching allocator's limit in GiB, decimals allowed, as
//	              set_per_process_memory_fraction sets it (default 80)
//	-device NAME  the card, as for maxbatch: a device profile's name or its
//	              total memory such as 24GB, optionally +ctx=600MiB; its
//	              usable memory is the limit, and the steps keep its cuBLAS
//	              workspace. -device and -budget exclude each other.
//	-json         write {"model", "batch", "height", "width", "budget" or
//	              "device", "rows"} instead; each row has precision,
//	              segments, peak, peak_reserved, saving (bytes),
//	              saving_fraction, fits, forward_flops, backward_flops,
//	              recompute_flops, recompute_overhead (a fraction),
//	              peak_phase, peak_layer and peak_node
//
// # models
//
//	onnxmem models [-json|-csv]
//
// Lists the built-in models: name, top-level layers, trainable parameters
// (those with a .grad, auxiliary branch included; PyTorch's
// model.parameters() also counts each head's 16 frozen DFL weights) and
// whether the graph was compared node for node with the export of the
// official code ("same as export") or has no export to compare with. The
// default model is marked with *.
//
//	-json  write {"default", "models": [{"name", "layers", "parameters",
//	       "checked"}]} instead
//
// # export-model
//
//	onnxmem export-model [-o FILE.onnx] [-classes N | -nc N] [-width F] [-depth F] [-weights] NAME
//
// Writes a built-in model as an ONNX file (opset 17, input images of dims
// [batch, 3, height, width], all symbolic), for onnxmem or any ONNX tool,
// with what-if knobs (models.Options): the class count, a width multiplier
// and a depth multiplier.
//
//	-o FILE     output file (default NAME.onnx); - writes to stdout
//	-classes N  classes the head predicts (default 80)
//	-width F    multiplier of every channel count, each rounded up to a
//	            multiple of 8 (default 1; yolov9-t at 2 is yolov9-s)
//	-depth F    multiplier of the RepNCSP blocks in each RepNCSPELAN4,
//	            rounded half to even, at least 1 (default 1)
//	-weights    give the weights zeros as data (4 bytes a parameter); by
//	            default they have dims and no data, like weightless exports
//
// # help
//
//	onnxmem help [COMMAND]
//
// Lists the commands, or prints a command's usage (the same as COMMAND -h).
// onnxmem -h is onnxmem help.
//
// Progress: report and sweep write one line per step to stderr when -v is
// given (sweep: per batch size; report: per setting and batch size, and per
// search), or rewrite one line when stderr is a terminal; stdout carries only
// the result.
package main
