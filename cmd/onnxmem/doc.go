// Command onnxmem predicts the GPU memory peak of a PyTorch training step
// from the network's exported ONNX graph: the figure that
// torch.cuda.max_memory_allocated reports, where in the step it falls and
// which tensors make it.
//
// What is simulated is the fp32 "model step" of package onnxmem: the
// parameters and the input batch are resident, the forward runs in train
// mode, the loss is sum(o.sum()) over the outputs, and the backward follows.
// Mixed precision (AMP), checkpoint segments, full training steps (loss,
// optimizer, EMA) and eval steps are not simulated yet; onnxmem says so
// rather than print a guess.
//
// Usage:
//
//	onnxmem [COMMAND [flags] [MODEL.onnx]]
//
// With no arguments onnxmem runs report on the default model. Flags may come
// before or after MODEL.onnx; "--" ends the flags. Every command takes -h,
// which prints its syntax, an example and its flags to stdout.
//
// Tables print sizes in GiB with two decimals; -json prints bytes. Output is
// deterministic. Errors go to stderr, prefixed "onnxmem: ". The exit code is
// 0 on success, 1 on a failure (a model that cannot be read or simulated, a
// file that cannot be written) and 2 on a usage error (an unknown command or
// flag, a bad flag value, a wrong number of arguments).
//
// # report
//
//	onnxmem report [-img N] [-batches LIST] [-batch N] [-json] [-v] [MODEL.onnx]
//
// Predicts the step at each batch size of -batches and prints, per batch
// size, the peak, the memory allocated after the forward, where the peak
// falls (phase and top-level layer) and whether the peak fits in 24, 40 and
// 80 GiB. These are nominal card capacities: the CUDA context and the
// allocator's fragmentation are not subtracted. Then, for the scenario at
// -batch, where the peak is (phase, event, node, layer), the 10 largest
// tensors alive at the peak and the live bytes by kind of buffer. A line says
// that AMP and checkpoint segments are not simulated yet (the text of
// onnxmem.Scenario.Supported).
//
// Without MODEL.onnx, report reads ../shared/yolov9/yolov9-c-train.onnx
// relative to the current directory (the shared folder beside the
// repository, when run from the repository's root), or else the first
// *-train.onnx in that folder; when there is none it fails with exit code 1.
//
//	-img N         input image size in pixels, square (default 640)
//	-batches LIST  comma-separated batch sizes (default 1,2,4,8,16,32,64)
//	-batch N       batch size whose peak is explained in detail (default 16)
//	-json          write JSON instead of the tables: model, path,
//	               nominal_capacity, results, detail (with at_peak and
//	               peak_by_kind) and not_simulated
//	-v             progress on stderr
//
// # sweep
//
//	onnxmem sweep [-img N] [-batches LIST] [-json] [-svg FILE] [-v] MODEL.onnx
//
// Predicts the step at each batch size and prints a table: batch, peak, peak
// requested (before the allocator's rounding), peak reserved, after forward,
// after backward, and the phase, layer and node of the peak.
//
//	-img N         input image size in pixels, square (default 640)
//	-batches LIST  comma-separated batch sizes (default 1,2,4,8,16,32,64)
//	-json          write {"model", "results": [...]} instead, in bytes
//	-svg FILE      also write a plot of the peak against the batch size
//	-v             progress on stderr
//
// # timeline
//
//	onnxmem timeline [-batch N] [-img N] [-json] [-svg FILE] MODEL.onnx
//
// Replays the measured step and prints a summary: allocated memory before
// the step (m0), after the forward, the forward's peak, the step's peak and
// where it falls, the peak requested and reserved, after the backward, and
// the events of each phase (forward, loss, backward, cleanup).
//
//	-batch N   batch size (default 8)
//	-img N     input image size in pixels, square (default 640)
//	-json      write {"model", "result", "phases", "samples"} instead: the
//	           allocator's allocated, requested and reserved bytes after
//	           every event of the step
//	-svg FILE  also write a plot of allocated and reserved memory against the
//	           event index, the phases shaded and divided by dashed lines and
//	           the peak marked
//
// # predict
//
//	onnxmem predict [-root DIR] < SCENARIOS.jsonl
//
// The interface for accuracy checks. Reads JSON Lines on stdin, one scenario
// an object, with the fields of the ground truth's calibration.jsonl: model
// (a path relative to -root), kind, batch, img (the square side), amp,
// segments and, for train steps, boxes_per_img, optimizer and ema. For each
// line it writes one line to stdout, at once: the same object with a field
// "predicted" added,
//
//	{"peak", "peak_req", "peak_reserved", "m0", "after_fwd", "fwd_peak", "after_bwd"}
//
// in bytes, or with a field "error" (a message starting "onnxmem: ") when the
// scenario cannot be simulated: a kind other than model_step, amp true or
// segments above 1, a model file that cannot be loaded, a missing or
// mistyped field. Nothing is skipped and nothing is guessed. kind, model,
// batch and img are required; a missing amp means false and a missing
// segments 0. Each model file is loaded once.
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
// # maxbatch
//
//	onnxmem maxbatch [-img N] [-budget GiB] [-limit N] [-json] MODEL.onnx
//
// Finds the largest batch size, at most -limit, whose predicted peak
// (allocated bytes) fits in the budget, by binary search; 0 when not even
// batch 1 fits.
//
//	-img N       input image size in pixels, square (default 640)
//	-budget GiB  memory budget in GiB, decimals allowed (default 80)
//	-limit N     largest batch size to consider (default 1024)
//	-json        write {"model", "budget", "limit", "max_batch", "result"}
//
// # help
//
//	onnxmem help [COMMAND]
//
// Lists the commands, or prints a command's usage (the same as COMMAND -h).
// onnxmem -h is onnxmem help.
//
// Progress: report and sweep write one line per batch size to stderr when -v
// is given, or rewrite one line when stderr is a terminal; stdout carries
// only the result.
package main
