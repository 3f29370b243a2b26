package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdPredict(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("predict",
		"onnxmem predict [-root DIR] [-sequence] < SCENARIOS.jsonl",
		"Predict reads scenarios as JSON Lines on stdin and writes one line for each\n(blank lines are skipped): the same object with \"predicted\" added, or with\n\"error\" when the scenario cannot be simulated. Model paths are relative to\n-root and stay inside it (no absolute path, no \"..\", no symbolic link out of\nit); a model that names no file there but a built-in model (onnxmem models)\nis that model, and \"model\": null means the built-in model of \"cfg\"; with\n\"nc\", a file whose head predicts other classes stands for the built-in\nmodel of \"cfg\" built with nc classes (Model(cfg, nc=nc)). An inference\nexport (export.py's) is simulated as the built-in model with its convolutions,\nwhich \"simulated_as\" names.\n\nKinds: model_step, train_step and eval_step (the ground truth's fields: batch,\nimg or img_h and img_w (a text model's seq, or any input's dims by name,\n\"inputs\": {\"input_ids\": [8, 512]}, dim 0 the batch), amp, half, segments, nc,\nboxes_per_img (a number or each image's count), optimizer, ema, trainer, prev_pred_alive,\nwarm_steps (the loop's iterations before the measured one, the last making\nthe optimizer's state: by default 4 under float16 amp, GradScaler skipping\nthe first three, and 1 otherwise), ...; and empty_cache, where the measuring\nharness empties the cache: before_step or before_warmup, by default the one\nof the ground truth of the model's family for model and eval steps and\nbefore_warmup for train steps, as a training loop runs; or never);\nmax_batch with \"step\" and \"capacity_bytes\", the caching allocator's\nlimit (int(f × total_memory) for set_per_process_memory_fraction(f); or\n\"fraction\" alone, f of the H200's total_memory; beside capacity_bytes,\nfraction is checked and says which f set it), which\nanswers {\"max_batch\", and the step's figures at it}; train_run with \"events\"\n(setup, train, val and ckpt; warm_steps as above when no train event is\nmarked \"skipped\"), which answers the run's peaks and the memory after\neach event (with \"gpus\": N, DDP over N GPUs, \"batch\" the total and\n\"sync_bn\" its --sync-bn: rank 0's run, and the other ranks' as\n\"other_ranks\", or with \"rank\" that rank's alone); and model, what the model holds once loaded: {\"params\",\n\"param_bytes\", \"buffer_bytes\", \"alloc_after_load\", \"n_layers\"}. A field that\na kind does not take, or a value that onnxmem does not simulate, is an error\nthat names it: never ignored.\n\nEach line is answered as it would run by itself, the first scenario of a fresh\nprocess: no line changes another's answer. -sequence is a measuring harness's\nmode: a model's model_step lines that follow each other run one after another\nin one process, as a harness that sweeps a model's scenarios measures them (the\ncaching allocator keeps what the earlier steps left, internal/sim.Process, which\nmoves reserved bytes); a line of another kind or model ends that process, and a\nline in error leaves it as it was. -alone, the default, is still accepted.",
		"onnxmem predict -root ../shared < ../shared/groundtruth/calibration.jsonl")
	root := f.String("root", ".", "`dir`ectory the scenarios' model paths are relative to")
	f.Bool("alone", true, "simulate every line by itself, as the first scenario of a fresh process: the default")
	sequence := f.Bool("sequence", false, "a measuring harness's mode: run a model's consecutive model_step lines one after another in one process")
	pos, code, ok := f.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return f.usageError(stderr, "predict reads stdin and takes no arguments, got: %s", pos[0])
	}
	if *sequence && f.isSet("alone") {
		return f.usageError(stderr, "-alone and -sequence: give one (-alone, every line by itself, is the default)")
	}
	p := &predictor{root: *root, models: map[string]loaded{}, sequence: *sequence}
	in := bufio.NewReader(stdin)
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for n := 1; ; n++ {
		line, long, rerr := readLine(in, maxLine)
		if long {
			ans := map[string]json.RawMessage{"error": marshal(fmt.Sprintf("onnxmem: line %d: longer than %d bytes: a scenario is one short JSON object; give per-image box counts as their mean (boxes_per_img) when a list is this long", n, maxLine)), "line": marshal(n)}
			if err := enc.Encode(ans); err != nil {
				return fail(stderr, err)
			}
			if err := out.Flush(); err != nil {
				return fail(stderr, err)
			}
		} else if len(bytes.TrimSpace(line)) > 0 {
			if err := enc.Encode(p.predict(line, n)); err != nil {
				return fail(stderr, err)
			}
			// One line out per line in, at once: a caller may wait for it.
			if err := out.Flush(); err != nil {
				return fail(stderr, err)
			}
		}
		if rerr == io.EOF {
			return 0
		}
		if rerr != nil {
			return fail(stderr, fmt.Errorf("reading stdin: %w", rerr))
		}
	}
}

// maxLine is the longest predict line read: far beyond any scenario (a
// run's events with per-image box counts take some kilobytes), it keeps
// a stream without newlines, such as /dev/zero, from filling memory.
const maxLine = 16 << 20

// readLine reads one line of in, up to and including its newline. A line
// longer than limit is read to its end but not kept: long is true and line
// is nil. err is io.EOF at the end of in, as bufio's.
func readLine(in *bufio.Reader, limit int) (line []byte, long bool, err error) {
	for {
		frag, err := in.ReadSlice('\n')
		if !long {
			if len(line)+len(frag) > limit {
				long, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return line, long, err
		}
	}
}

// predictor answers scenarios, loading each model file once.
type predictor struct {
	root   string
	dir    *os.Root // root, opened at the first model file
	dirOf  string   // the root that dir is
	dirErr error
	models map[string]loaded // by path
	// sequence runs the model_step lines of one model that follow each
	// other in one process, in order, as a harness that sweeps a model's
	// scenarios in one process measures them (internal/sim.Process): proc
	// is that process, of model procOf, and any other line ends it.
	// Otherwise every line is simulated by itself.
	sequence bool
	proc     *sim.Process
	procOf   *sim.Model
}

// loaded is a model or the error loading it gave.
type loaded struct {
	m   *sim.Model
	err error
}

// predict answers one line: the scenario with "predicted" or "error" added
// (and a stale one of the two removed), and "simulated_as", the built-in
// model that stood for an inference export, when one did; or for a line
// that is not a JSON object, {"error", "line", "raw"}.
func (p *predictor) predict(line []byte, n int) map[string]json.RawMessage {
	line = bytes.TrimSpace(line)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
		msg := fmt.Sprintf("onnxmem: line %d: not a JSON object", n)
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			msg = fmt.Sprintf("onnxmem: line %d: invalid JSON: %v", n, err)
		}
		return map[string]json.RawMessage{"error": marshal(msg), "line": marshal(n), "raw": marshal(string(line))}
	}
	delete(obj, "predicted")
	delete(obj, "error")
	delete(obj, "simulated_as")
	pr, err := p.guarded(obj)
	if err != nil {
		obj["error"] = marshal(errText(err))
		return obj
	}
	obj["predicted"] = marshal(pr.json())
	// A built-in model that stood for an inference export is named.
	if m, err := p.model(obj); err == nil && m.Builtin != "" {
		obj["simulated_as"] = marshal(m.Builtin)
	}
	return obj
}

// Fields that every kind of line may carry. "measured" holds what a
// measurement found and "cfg" names the configuration; neither changes the
// prediction. "deterministic" (deterministic algorithms, cudnn.deterministic
// and CUBLAS_WORKSPACE_CONFIG=:4096:8, which is the Hopper default that
// onnxmem assumes) changed no peak measured on the H200.
var commonFields = []string{"kind", "cfg", "model", "measured", "family", "deterministic", "alloc_conf"}

// stepFields are the fields of each kind of step beyond commonFields; a
// max_batch line takes those of its "step" but "batch", plus its own.
var stepFields = map[string][]string{
	"model_step": {"batch", "img", "img_h", "img_w", "seq", "inputs", "amp", "amp_dtype", "half", "segments", "checkpoint", "nc", "empty_cache"},
	"eval_step":  {"batch", "img", "img_h", "img_w", "seq", "inputs", "amp", "amp_dtype", "half", "segments", "nc", "empty_cache"},
	"train_step": {"batch", "img", "img_h", "img_w", "seq", "inputs", "amp", "amp_dtype", "half", "segments", "checkpoint", "nc", "boxes_per_img", "optimizer", "ema", "trainer", "prev_pred_alive", "warm_steps", "empty_cache"},
}

// maxBatchFields are a max_batch line's own fields: the step it searches
// and the allocator's limit.
var maxBatchFields = []string{"step", "capacity_bytes", "fraction"}

// prediction is what a line's simulation gives: a Result, and for a
// max_batch line the batch found.
type prediction struct {
	r         *sim.Result
	maxBatch  *int64
	run       *sim.RunResult
	others    *sim.RunResult // a DDP run's ranks but 0
	footprint *sim.Footprint
	layers    int // of a model line
}

func (p prediction) json() any {
	if p.run != nil {
		js := newRunPredicted(publicRun(p.run))
		if p.others != nil {
			o := newRunPredicted(publicRun(p.others))
			js.Others = &o
		}
		return js
	}
	if f := p.footprint; f != nil {
		return footprintJSON{Params: f.Params, ParamBytes: f.ParamBytes, BufferBytes: f.BufferBytes, Allocated: f.Allocated, Layers: p.layers}
	}
	if p.maxBatch == nil {
		return simPredicted(p.r)
	}
	js := maxBatchPredicted{MaxBatch: *p.maxBatch}
	if p.r != nil {
		pr := simPredicted(p.r)
		js.predicted = &pr
	}
	return js
}

// simPredicted is an engine's result as predict writes it.
func simPredicted(r *sim.Result) predicted {
	return predicted{
		Peak: r.Peak, PeakReq: r.PeakRequested, PeakReserved: r.PeakReserved, ReservedAfter: r.ReservedAfter, GPUMem: r.GPUMem(),
		M0: r.M0, AfterFwd: r.AfterForward, FwdPeak: r.ForwardPeak, AfterBwd: r.AfterBackward,
	}
}

// footprintJSON is a model line's answer: sim.Footprint, named as the
// ground truth names what it measured after model.to('cuda').
type footprintJSON struct {
	Params      int64 `json:"params"`
	ParamBytes  int64 `json:"param_bytes"`
	BufferBytes int64 `json:"buffer_bytes"`
	Allocated   int64 `json:"alloc_after_load"`
	// Layers is the number of top-level layers (checkpoint_sequential's).
	Layers int `json:"n_layers"`
}

// modelFields are a model line's fields beyond commonFields: its measured
// figures, which it carries at the top level, and nc for a built-in model.
var modelFields = []string{"params", "param_bytes", "buffer_bytes", "alloc_after_load", "n_layers", "nc"}

// maxBatchPredicted is a max_batch line's answer: the batch and the step's
// figures at it (absent when not even batch 1 fits).
type maxBatchPredicted struct {
	MaxBatch int64 `json:"max_batch"`
	*predicted
}

// guarded is simulate, with a panic (a broken invariant inside onnxmem)
// turned into the line's error, so that the stream answers every line and
// goes on.
func (p *predictor) guarded(obj map[string]json.RawMessage) (pr prediction, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.proc = nil // it may have stopped halfway through a step
			err = fmt.Errorf("onnxmem: internal error on this line, please report it with the line: %v", r)
		}
	}()
	return p.simulate(obj)
}

// simulate predicts the scenario a line describes.
func (p *predictor) simulate(obj map[string]json.RawMessage) (prediction, error) {
	var kind string
	if err := field(obj, "kind", &kind, true); err != nil {
		return prediction{}, err
	}
	if kind != "model_step" {
		p.proc = nil // a harness's other work: the sweep's process ends
	}
	step, allowed := kind, []string(nil)
	switch kind {
	case "model_step", "eval_step", "train_step":
		allowed = stepFields[kind]
	case "max_batch":
		if err := field(obj, "step", &step, true); err != nil {
			return prediction{}, err
		}
		if _, ok := stepFields[step]; !ok {
			return prediction{}, fmt.Errorf("onnxmem: max_batch: unknown step %q (want model_step, train_step or eval_step)", step)
		}
		allowed = append(slices.DeleteFunc(slices.Clone(stepFields[step]), func(f string) bool { return f == "batch" }), maxBatchFields...)
	case "train_run":
		allowed = runFields
	case "model":
		allowed = modelFields
	default:
		return prediction{}, fmt.Errorf("onnxmem: unknown kind %q (want model, model_step, train_step, eval_step, max_batch or train_run)", kind)
	}
	for _, name := range sortedKeys(obj) {
		if !slices.Contains(commonFields, name) && !slices.Contains(allowed, name) {
			return prediction{}, fmt.Errorf("onnxmem: %s line: unknown field %q (%s line takes %s)", kind, name, article(kind),
				strings.Join(append(slices.Clone(commonFields[1:]), allowed...), ", "))
		}
	}
	switch kind {
	case "train_run":
		return p.trainRun(obj)
	case "model":
		m, err := p.model(obj)
		if err != nil {
			return prediction{}, err
		}
		var sc sim.Options
		for _, err := range []error{field(obj, "family", &sc.Family, false), field(obj, "alloc_conf", &sc.AllocConf, false),
			field(obj, "deterministic", new(bool), false)} {
			if err != nil {
				return prediction{}, err
			}
		}
		if sc.Family != "" {
			if m, err = m.As(sc.Family); err != nil {
				return prediction{}, err
			}
		}
		f, err := m.Footprint(sc)
		return prediction{footprint: f, layers: m.Layers()}, err
	}
	sc, scErr := stepScenario(obj, step, kind == "max_batch")
	if scErr != nil && scErr != errNoBoxes {
		return prediction{}, scErr
	}
	m, err := p.model(obj)
	if err != nil {
		return prediction{}, err
	}
	if family := cmp.Or(sc.Family, m.Family); scErr == errNoBoxes && family != "generic" {
		return prediction{}, fmt.Errorf("%w: the %s family's loss assigns each image's boxes", errNoBoxes, family)
	}
	if err := bindInputs(obj, m, &sc, kind == "max_batch"); err != nil {
		return prediction{}, err
	}
	if kind == "model_step" && p.sequence {
		return p.inProcess(m, sc)
	}
	if kind != "max_batch" {
		r, err := m.Simulate(sc)
		return prediction{r: r}, err
	}
	var capacity int64
	var fraction float64
	if err := field(obj, "fraction", &fraction, false); err != nil {
		return prediction{}, err
	}
	_, hasCapacity := obj["capacity_bytes"]
	if _, ok := obj["fraction"]; ok && (fraction <= 0 || fraction > 1) {
		return prediction{}, fmt.Errorf("onnxmem: max_batch: fraction %g: set_per_process_memory_fraction takes more than 0 and at most 1", fraction)
	}
	// With capacity_bytes, fraction only says which fraction of its
	// card's memory set that limit, which capacity_bytes already is.
	if hasCapacity || fraction == 0 {
		if err := field(obj, "capacity_bytes", &capacity, true); err != nil {
			return prediction{}, fmt.Errorf("%w (or \"fraction\", set_per_process_memory_fraction's, of the H200 that predict simulates)", err)
		}
	} else {
		// What set_per_process_memory_fraction(f) sets on the card that
		// predict simulates (its cuBLAS workspace and cuDNN's choices):
		// int(f × total_memory), as CUDACachingAllocator computes it.
		h200, err := onnxmem.ParseDevice("h200")
		if err != nil {
			return prediction{}, err
		}
		capacity = int64(fraction * float64(h200.Total))
	}
	if capacity <= 0 {
		return prediction{}, fmt.Errorf("onnxmem: max_batch: capacity_bytes %d: want the allocator's limit in bytes, int(fraction × total_memory)", capacity)
	}
	n, r, err := m.MaxBatch(sc, capacity, maxBatchSearch)
	if err == nil && n == maxBatchSearch {
		return prediction{}, fmt.Errorf("onnxmem: max_batch: batch %d, the most predict searches, still fits under capacity_bytes %d: the largest batch lies beyond it", n, capacity)
	}
	return prediction{r: r, maxBatch: &n}, err
}

// inProcess simulates a model step as the next scenario of m's process: the
// one the previous lines ran, or a new one when the previous line was of
// another model or kind, or the process cannot take the scenario
// (sim.ErrProcess: other parameters, workspaces, allocator options or
// way of emptying the cache, or a step before it ran out of memory, which a
// harness catches and goes on from as if anew). A line in error leaves the
// process as it was.
func (p *predictor) inProcess(m *sim.Model, sc sim.Options) (prediction, error) {
	if p.proc != nil && p.procOf == m {
		r, err := p.proc.Simulate(sc)
		if !errors.Is(err, sim.ErrProcess) {
			// Simulated, or a scenario error: a line that did not run
			// leaves the process as it was.
			return prediction{r: r}, err
		}
	}
	proc := m.NewProcess()
	r, err := proc.Simulate(sc)
	if err == nil {
		p.proc, p.procOf = proc, m
	}
	return prediction{r: r}, err
}

// maxBatchSearch bounds predict's search for a max batch.
const maxBatchSearch = 1 << 16

// stepScenario reads the scenario of a step line: of a max_batch line's
// step when search is set, without a batch.
func stepScenario(obj map[string]json.RawMessage, step string, search bool) (sim.Options, error) {
	var sc sim.Options
	var img, h, w int64
	var ampDType, opt, trainer, allocConf, emptyCache string
	var half, prevPred bool
	fields := []error{
		field(obj, "img", &img, false),
		field(obj, "img_h", &h, false),
		field(obj, "img_w", &w, false),
		field(obj, "seq", &sc.Seq, false),
		field(obj, "family", &sc.Family, false),
		field(obj, "amp", &sc.AMP, false),
		field(obj, "amp_dtype", &ampDType, false),
		field(obj, "half", &half, false),
		field(obj, "segments", &sc.Segments, false),
		field(obj, "nc", new(int64), false), // it picks the model: predictor.model
		field(obj, "alloc_conf", &allocConf, false),
		field(obj, "deterministic", new(bool), false),
		field(obj, "empty_cache", &emptyCache, false),
	}
	if !search {
		fields = append(fields, field(obj, "batch", &sc.Batch, true))
	} else {
		sc.Batch = 1
	}
	if step == "train_step" {
		fields = append(fields,
			boxesField(obj, &sc, search),
			field(obj, "optimizer", &opt, false),
			field(obj, "ema", &sc.EMA, false),
			field(obj, "trainer", &trainer, false),
			field(obj, "prev_pred_alive", &prevPred, false),
			field(obj, "warm_steps", &sc.WarmSteps, false))
	}
	noBoxes := false
	for _, e := range fields {
		if e == errNoBoxes {
			noBoxes = true
		} else if e != nil {
			return sc, e
		}
	}
	if raw, ok := obj["checkpoint"]; ok && string(raw) != "null" {
		var plan [][2]int
		if err := json.Unmarshal(raw, &plan); err != nil {
			return sc, fmt.Errorf("onnxmem: field \"checkpoint\": %s is not a list of [first, last] layer ranges such as [[0,5],[9,12]]", raw)
		}
		for i, r := range plan {
			if r[0] < 0 || r[1] < r[0] || (i > 0 && r[0] <= plan[i-1][1]) {
				return sc, fmt.Errorf("onnxmem: field \"checkpoint\": range %v: want [first, last] with first ≤ last, in order and disjoint", r)
			}
			sc.Checkpoint = append(sc.Checkpoint, sim.Range{From: r[0], To: r[1] + 1})
		}
	}
	switch {
	case (h == 0) != (w == 0):
		return sc, fmt.Errorf("onnxmem: img_h %d and img_w %d: give both sides of a non-square image, or neither", h, w)
	case sc.Seq < 0:
		return sc, fmt.Errorf("onnxmem: field \"seq\": %d: want a sequence length of at least 1", sc.Seq)
	case img == 0 && h == 0 && sc.Seq > 0:
		// A text model's line: its input is the sequence.
	case img == 0 && h == 0 && obj["inputs"] != nil && string(obj["inputs"]) != "null":
		// Its inputs' dims give the sizes, once the model is known
		// (bindInputs).
	case img == 0 && h == 0:
		return sc, fmt.Errorf("onnxmem: missing field \"img\" (or \"img_h\" and \"img_w\", or a text model's \"seq\", or \"inputs\")")
	case h == 0:
		h, w = img, img
	case img != 0 && img != max(h, w):
		return sc, fmt.Errorf("onnxmem: img %d with img_h %d and img_w %d: img is the larger side", img, h, w)
	}
	sc.Height, sc.Width = h, w
	switch ampDType {
	case "float16", "torch.float16", "fp16":
		sc.AMPDType = "float16"
	case "bfloat16", "torch.bfloat16", "bf16":
		sc.AMPDType = "bfloat16"
	case "":
	default:
		return sc, fmt.Errorf("onnxmem: amp_dtype %q: want float16 or bfloat16", ampDType)
	}
	sc.AllocConf = allocConf
	sc.EmptyCache = sim.EmptyCache(emptyCache)
	switch step {
	case "eval_step":
		// Validation runs the EMA copy halved (val_dual.run(half=amp)),
		// without gradients, whatever the training's amp and segments.
		// half false: val_dual.run(half=False), as train_dual.py calls it
		// without amp: the copy runs in float32.
		if _, ok := obj["half"]; ok && !half {
			sc.EvalFloat = true
		}
		sc.Eval, sc.AMP, sc.AMPDType, sc.Segments = true, false, "", 0
	case "train_step":
		sc.Train = true
		if opt != "" {
			o, err := sim.ParseOptimizer(opt)
			if err != nil {
				return sc, err
			}
			sc.Optimizer = o
		}
		sc.Trainer = trainer
		sc.PrevPredAlive = prevPred
		sc.Half = half // false, or refused by Supported
	default:
		sc.Half = half
	}
	pending := sc.Height == 0 && sc.Seq == 0 // the sizes of "inputs", checked once bound
	if err := sc.Supported(); (err != nil && !pending) || !noBoxes {
		if pending {
			err = nil
		}
		return sc, err
	}
	return sc, errNoBoxes
}

// errNoBoxes is boxesField's answer when a train step gives no
// boxes_per_img: an error for a family whose loss reads targets (YOLOv9's),
// none for the generic family, whose loss is the outputs' sum.
var errNoBoxes = errors.New("onnxmem: missing field \"boxes_per_img\"")

// boxesField reads boxes_per_img: a number of boxes in every image, or (not
// in a max_batch search, whose batch varies) a list of each image's count.
func boxesField(obj map[string]json.RawMessage, sc *sim.Options, search bool) error {
	raw, ok := obj["boxes_per_img"]
	if !ok || string(raw) == "null" {
		return errNoBoxes
	}
	if json.Unmarshal(raw, &sc.Boxes) == nil {
		return nil
	}
	if json.Unmarshal(raw, &sc.BoxCounts) != nil || sc.BoxCounts == nil {
		return fmt.Errorf("onnxmem: field \"boxes_per_img\": %s is neither an integer nor a list of integers", raw)
	}
	if search {
		return fmt.Errorf("onnxmem: max_batch: boxes_per_img is a list of %d counts, and a search changes the batch: give one count for every image", len(sc.BoxCounts))
	}
	return nil
}

// model returns the line's model: its file under the root, or with
// "model" null or a built-in name that no file has, the built-in model of
// "cfg" (with "nc" classes).
func (p *predictor) model(obj map[string]json.RawMessage) (*sim.Model, error) {
	var model, cfg string
	var nc int64
	if err := field(obj, "model", &model, false); err != nil {
		return nil, err
	}
	if err := field(obj, "cfg", &cfg, false); err != nil {
		return nil, err
	}
	if err := field(obj, "nc", &nc, false); err != nil {
		return nil, err
	}
	if model == "" {
		if cfg == "" {
			return nil, fmt.Errorf("onnxmem: missing field \"model\" (or, for a built-in model, \"model\": null and its \"cfg\")")
		}
		model = cfg
	} else {
		// A model path stays inside -root: no absolute path, no "..", no
		// symbolic link out of it (os.Root refuses those).
		if filepath.IsAbs(model) || !filepath.IsLocal(model) {
			return nil, fmt.Errorf("onnxmem: model %q: give a path inside -root (%s), relative to it, without \"..\"", model, p.root)
		}
		if !slices.Contains(models.Names(), model) || p.inRoot(model) {
			path := filepath.Join(p.root, model)
			l, ok := p.models[path]
			if !ok {
				if l.err = p.openRoot(); l.err == nil {
					l.m, l.err = sim.LoadIn(p.dir, model)
				}
				p.models[path] = l
			}
			if l.err != nil || nc == 0 {
				return l.m, l.err
			}
			// nc with a file: the file, when its head predicts nc
			// classes; else Model(cfg, nc=nc), the built-in cfg with
			// nc classes, which differs from the export of cfg only in
			// its head's class channels.
			has, err := l.m.Classes()
			switch {
			case err != nil:
				return nil, err
			case has == 0:
				return nil, fmt.Errorf("onnxmem: model %q: its family (%s) reads no classes from its outputs: nc does not apply; leave it out", model, l.m.Family)
			case has == nc:
				return l.m, nil
			case l.m.Builtin != "":
				// An inference export: its stand-in with nc classes.
				key := fmt.Sprintf("%s nc=%d", path, nc)
				b, ok := p.models[key]
				if !ok {
					b.m, b.err = sim.BuiltinClasses(l.m.Builtin, nc)
					if b.err == nil {
						b.m.Name, b.m.Builtin = l.m.Name, l.m.Builtin
					}
					p.models[key] = b
				}
				return b.m, b.err
			case !slices.Contains(models.Names(), cfg):
				return nil, fmt.Errorf("onnxmem: model %q predicts %d classes, and nc is %d: give an export with nc classes, or \"model\": null and a built-in \"cfg\" (onnxmem models)", model, has, nc)
			}
			model = cfg
		}
	}
	key := fmt.Sprintf("%s nc=%d", model, nc)
	l, ok := p.models[key]
	if !ok {
		if nc != 0 {
			l.m, l.err = sim.BuiltinClasses(model, nc)
		} else {
			l.m, l.err = sim.Builtin(model)
		}
		p.models[key] = l
	}
	return l.m, l.err
}

// openRoot opens the -root directory once.
func (p *predictor) openRoot() error {
	if p.dirOf != p.root || p.dir == nil && p.dirErr == nil {
		if p.dir != nil {
			p.dir.Close()
		}
		p.dirOf = p.root
		p.dir, p.dirErr = os.OpenRoot(p.root)
		if p.dirErr != nil {
			p.dirErr = fmt.Errorf("onnxmem: -root: %w", p.dirErr)
		}
	}
	return p.dirErr
}

// inRoot reports whether -root holds something named name (a file there
// shadows the built-in model of that name).
func (p *predictor) inRoot(name string) bool {
	if p.openRoot() != nil {
		return false
	}
	_, err := p.dir.Stat(name)
	return err == nil
}

// sortedKeys returns a line's field names in order.
func sortedKeys(obj map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// bindInputs applies a step line's "inputs", {"input_ids": [8, 512]}, to
// its scenario as -input does (bindDims), in the inputs' name order: dim 0
// is the line's batch (0 in a max_batch line, whose batch is searched), a
// token input's dim 1 its "seq", an image's sides its "img".
func bindInputs(obj map[string]json.RawMessage, m *sim.Model, sc *sim.Options, search bool) error {
	raw, ok := obj["inputs"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var inputs map[string][]int64
	if err := json.Unmarshal(raw, &inputs); err != nil {
		return fmt.Errorf("onnxmem: field \"inputs\": %s is not an object of input names and dims such as {\"input_ids\": [8, 512]}", quoteFlag(string(raw)))
	}
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		d := inputs[name]
		where := fmt.Sprintf("field \"inputs\": %s", quoteFlag(name))
		for i, n := range d {
			if n < 1 && !(i == 0 && n == 0 && search) {
				return fmt.Errorf("onnxmem: %s: dim %d is %d: want a size of at least 1 (dim 0 of a max_batch line's input 0: its batch is searched)", where, i, n)
			}
		}
		b, err := bindDims(m, name, d, where)
		if err != nil {
			return err
		}
		if !search && d[0] != sc.Batch {
			return fmt.Errorf("onnxmem: %s: dim 0 is %d and \"batch\" %d: the input's dim 0 is the batch", where, d[0], sc.Batch)
		}
		switch {
		case b.seq > 0 && sc.Seq > 0 && b.seq != sc.Seq:
			return fmt.Errorf("onnxmem: %s: sequence %d and \"seq\" %d: give one", where, b.seq, sc.Seq)
		case b.seq > 0:
			sc.Seq = b.seq
		case sc.Height > 0 && (b.h != sc.Height || b.w != sc.Width):
			return fmt.Errorf("onnxmem: %s: image %dx%d and \"img\" %dx%d: give one", where, b.h, b.w, sc.Height, sc.Width)
		default:
			sc.Height, sc.Width = b.h, b.w
		}
	}
	return sc.Supported()
}

// field decodes obj[name] into v. A missing or null field leaves v alone and
// is an error only when required.
func field(obj map[string]json.RawMessage, name string, v any, required bool) error {
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		if required {
			return fmt.Errorf("onnxmem: missing field %q", name)
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		want := "a string"
		switch v.(type) {
		case *bool:
			want = "true or false"
		case *int, *int64:
			want = "an integer"
		}
		return fmt.Errorf("onnxmem: field %q: %s is not %s", name, raw, want)
	}
	return nil
}

// marshal encodes a value that always encodes.
func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// article returns kind with its indefinite article: "an eval_step".
func article(kind string) string {
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}
