package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// flagSet is a subcommand's flags with its usage text. Flags may come before
// or after the positional arguments; "--" ends them.
type flagSet struct {
	*flag.FlagSet
	syntax  string // "onnxmem sweep [flags] MODEL.onnx"
	about   string // one sentence
	example string // one command line
	family  *string
	nc      *int64
	img     *imageSize // -img, when the command has it
	input   *string    // -input, with -img
	ema     *bool      // -ema, when the command has it
	stderr  io.Writer  // where parse was told to report, for notes
}

func newFlagSet(name, syntax, about, example string) *flagSet {
	fs := flag.NewFlagSet("onnxmem "+name, flag.ContinueOnError)
	// The flag package's own messages are replaced by usageError's.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, syntax: syntax, about: about, example: example}
}

// printUsage writes the full help: syntax, description, example, flags.
func (f *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n\nexample:\n  %s\n", f.syntax, f.about, f.example)
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		f.SetOutput(w)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
}

// parse parses args and returns the positional arguments. When it returns
// ok false the command must stop with exit code code: 0 after -h (the usage
// went to stdout), 2 after a bad flag (the error went to stderr).
func (f *flagSet) parse(args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	f.stderr = stderr
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.printUsage(stdout)
			return nil, 0, false
		}
		if err != nil {
			return nil, f.usageError(stderr, "%v", err), false
		}
		rest := f.Args()
		if len(rest) == 0 || len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			if f.on("json") && f.on("csv") {
				return nil, f.usageError(stderr, "-json and -csv: give one"), false
			}
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// on reports whether the boolean flag name exists and is true.
func (f *flagSet) on(name string) bool {
	fl := f.Lookup(name)
	return fl != nil && fl.Value.String() == "true"
}

// usageError reports a usage error and returns exit code 2.
func (f *flagSet) usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "onnxmem: %s\nusage: %s\nRun '%s -h' for details.\n", shortenQuoted(fmt.Sprintf(format, args...)), f.syntax, f.Name())
	return 2
}

// parseNoArgs parses the flags of a command that takes no arguments. When
// ok is false the command must stop with exit code code, as after parse.
func (f *flagSet) parseNoArgs(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	pos, code, ok := f.parse(args, stdout, stderr)
	if ok && len(pos) > 0 {
		return f.usageError(stderr, "%s takes no arguments, got: %s", strings.TrimPrefix(f.Name(), "onnxmem "), pos[0]), false
	}
	return code, ok
}

// parseModel parses flags around one MODEL.onnx argument and returns it.
// With optional set, no argument is allowed and gives "". When ok is false
// the command must stop with exit code code, as after parse.
func (f *flagSet) parseModel(args []string, optional bool, stdout, stderr io.Writer) (path string, code int, ok bool) {
	pos, code, ok := f.parse(args, stdout, stderr)
	switch {
	case !ok:
		return "", code, false
	case len(pos) == 1:
		return pos[0], 0, true
	case len(pos) > 1:
		return "", f.usageError(stderr, "want one model, got %d arguments: %s", len(pos), strings.Join(pos, " ")), false
	case optional:
		return "", 0, true
	}
	return "", f.usageError(stderr, "no model given"), false
}

// parseAndLoad parses flags around one MODEL.onnx and loads the model.
func (f *flagSet) parseAndLoad(args []string, stdout, stderr io.Writer) (m *onnxmem.Model, code int, ok bool) {
	path, code, ok := f.parseModel(args, false, stdout, stderr)
	if !ok {
		return nil, code, false
	}
	m, err := f.load(path)
	if err != nil {
		return nil, fail(stderr, err), false
	}
	return m, 0, true
}

// familyFlag adds -family, the model family to simulate the model as, and
// -nc, the classes of its head.
func (f *flagSet) familyFlag() {
	f.family = f.String("family", "", "simulate the model as this model `family`: "+strings.Join(onnxmem.Families(), " or ")+"\n(default: the family detected from the graph's names)")
	f.nc = f.Int64("nc", 0, "the `number` of classes of a built-in model's head (a dataset's nc; default 80),\nas Model(cfg, nc=nc) builds it; with a file, the classes its head must have")
}

// load loads a model as load does, with -nc's classes, as the family of
// -family when given. It tells stderr when a built-in model stands for an
// inference export.
func (f *flagSet) load(path string) (*onnxmem.Model, error) {
	m, err := load(path)
	if err == nil && f.nc != nil && f.isSet("nc") {
		m, err = withClasses(m, *f.nc)
	}
	if err == nil && m.Builtin != "" && f.stderr != nil {
		fmt.Fprintf(f.stderr, "onnxmem: %s\n", standInNote(path, m))
	}
	if err == nil && m.Note != "" && f.stderr != nil && (f.family == nil || *f.family == "") {
		fmt.Fprintf(f.stderr, "onnxmem: %s: %s (-family NAME simulates it as that family all the same)\n", path, m.Note)
	}
	if err == nil && f.ema != nil && m.Family == "generic" {
		// train_dual.py keeps an EMA; a generic training loop (timm's
		// train.py without --model-ema, transformers' Trainer) does not.
		if f.isSet("ema") && *f.ema {
			return nil, errors.New("onnxmem: -ema: the generic family's training loop keeps no EMA copy (train_dual.py's does)")
		}
		*f.ema = false
	}
	if err == nil && f.input != nil && *f.input != "" {
		if f.isSet("seq") || f.isSet("img") {
			return nil, errors.New("onnxmem: -input gives the input's dims: drop -seq and -img")
		}
		err = f.bindInput(path, *f.input)
	}
	if err == nil && f.img != nil && !f.isSet("img") && (f.input == nil || *f.input == "") {
		if h, w, ok := m.FixedImage(); ok {
			f.img.H, f.img.W = h, w
		}
	}
	if err == nil && f.img != nil && (f.isSet("img") || f.input != nil && *f.input != "") && m.Family == "yolov9" {
		// train_dual.py's check_img_size: the size rounded up to a
		// multiple of the stride, with a warning.
		r := imageSize{H: roundUp(f.img.H, dataset.Stride), W: roundUp(f.img.W, dataset.Stride)}
		if r != *f.img && f.stderr != nil {
			fmt.Fprintf(f.stderr, "onnxmem: -img %s: train_dual.py's check_img_size trains at %s, a multiple of the stride %d: simulated at %s\n", f.img, &r, dataset.Stride, &r)
		}
		*f.img = r
	}
	if err != nil || f.family == nil || *f.family == "" {
		return m, err
	}
	return m.As(*f.family)
}

// roundUp is n rounded up to a multiple of k (make_divisible).
func roundUp(n, k int64) int64 { return (n + k - 1) / k * k }

// withClasses returns m with nc classes (Model.WithClasses), its errors
// said of -nc.
func withClasses(m *onnxmem.Model, nc int64) (*onnxmem.Model, error) {
	b, err := m.WithClasses(nc)
	if err != nil {
		return nil, fmt.Errorf("-nc %d: %s", nc, strings.TrimPrefix(err.Error(), "onnxmem: "))
	}
	return b, nil
}

// standInNote says that a built-in model stands for the inference export
// at path, and why.
func standInNote(path string, m *onnxmem.Model) string {
	classes, _ := m.Classes()
	return fmt.Sprintf("%s is an inference export (its batch norms folded into the convolutions): simulating the built-in %s with %d classes, whose training graph has the same convolutions (a model that differs from it in other layers is not this one)", path, m.Builtin, classes)
}

// exit is a command's exit code for its final error: 0 for nil, else 1
// after reporting the error.
func exit(stderr io.Writer, err error) int {
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// fail reports a failure and returns exit code 1.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, errText(err))
	return 1
}

// errText is an error's message with the "onnxmem: " prefix, once, and
// its long quoted names shortened (shortenQuoted).
func errText(err error) string {
	s := shortenQuoted(err.Error())
	if strings.HasPrefix(s, "onnxmem: ") {
		return s
	}
	return "onnxmem: " + s
}

// quotedKeep is how many bytes of a long quoted name a message keeps at
// each end.
const quotedKeep = 40

// shortenQuoted shortens each double-quoted string of a message (a node's,
// a file's, a flag value's name, as %q writes it) longer than
// 3·quotedKeep bytes to its start and its end around "…", with its length:
// an input may name things with a megabyte, and a message stays one
// readable line.
func shortenQuoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i + 1
		for j < len(s) && s[j] != '"' {
			if s[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(s) { // no closing quote
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		q := s[i+1 : j]
		if len(q) > 3*quotedKeep {
			head, tail := q[:quotedKeep], q[len(q)-quotedKeep:]
			for !utf8.ValidString(head) && len(head) > 0 {
				head = head[:len(head)-1]
			}
			for !utf8.ValidString(tail) && len(tail) > 0 {
				tail = tail[1:]
			}
			fmt.Fprintf(&b, "\"%s…%s\" (%d bytes)", head, tail, len(q))
		} else {
			b.WriteString(s[i : j+1])
		}
		s = s[j+1:]
	}
}

// Common flags.

// imgFlag adds -img, the input image's size: 640, or the size an export
// fixed (load sets it).
func (f *flagSet) imgFlag() *imageSize {
	f.img = &imageSize{H: onnxmem.DefaultImage, W: onnxmem.DefaultImage}
	f.Var(f.img, "img", "input image `size` in pixels: a side (square) or HEIGHTxWIDTH such as 384x640, height first as YOLO's --imgsz h w\n(default 640, or the size the export fixed, such as a torchvision export's 224)")
	f.Var((*seqFlag)(f.img), "seq", "a text model's sequence `length`: its token inputs' dim 1 (input_ids of [batch, sequence]); required for one")
	f.input = f.String("input", "", "an input's dims by name, `NAME=DIMS`, dim 0 the batch (B: the command's): input_ids=8x512 is -batch 8 -seq 512,\nimages=Bx3x384x640 is -img 384x640")
	return f.img
}

// imageSize is a flag.Value: the input image's height and width, given as
// one side ("640", a square) or as "384x640", height first; and, for a text
// model, the sequence length (-seq).
type imageSize struct{ H, W, Seq int64 }

// seqFlag is -seq, the sequence length of an imageSize.
type seqFlag imageSize

func (s *seqFlag) String() string { return strconv.FormatInt(s.Seq, 10) }

func (s *seqFlag) Set(v string) error {
	var p positiveInt
	if p.Set(v) != nil {
		return errors.New("want a sequence length of at least 1 token, such as 512")
	}
	s.Seq = int64(p)
	return nil
}

func (s *imageSize) String() string {
	if s.Seq > 0 {
		return "seq " + strconv.FormatInt(s.Seq, 10)
	}
	if s.H == s.W {
		return strconv.FormatInt(s.H, 10)
	}
	return fmt.Sprintf("%dx%d", s.H, s.W)
}

func (s *imageSize) Set(v string) error {
	h, w, rect := strings.Cut(strings.ReplaceAll(v, "×", "x"), "x")
	if !rect {
		w = h
	}
	var p, q positiveInt
	if p.Set(h) != nil || q.Set(w) != nil {
		return errors.New("want a side of at least 1 pixel such as 640, or HEIGHTxWIDTH such as 384x640")
	}
	s.H, s.W = int64(p), int64(q)
	return nil
}

// batchesFlag adds -batches, a comma-separated list of batch sizes.
func (f *flagSet) batchesFlag() *batchList {
	b := &batchList{1, 2, 4, 8, 16, 32, 64}
	f.Var(b, "batches", "comma-separated `list` of batch sizes")
	return b
}

// verboseFlag adds -v, progress on stderr.
func (f *flagSet) verboseFlag() *bool {
	return f.Bool("v", false, "show progress on stderr (shown anyway when stderr is a terminal)")
}

// jsonFlag adds -json.
func (f *flagSet) jsonFlag() *bool {
	return f.Bool("json", false, "write JSON to stdout instead of a table (sizes in bytes)")
}

// limitFlags adds -budget and -device, the limit a step must fit under;
// the returned function reads them after parsing: a device, or the budget
// (80 GiB by default).
func (f *flagSet) limitFlags() func() (fitCriterion, error) {
	b := gibValue(80)
	f.Var(&b, "budget", "the caching allocator's limit in `GiB` (may have decimals), as set_per_process_memory_fraction sets it")
	device := f.deviceFlag()
	return func() (fitCriterion, error) {
		d, err := device()
		switch {
		case err != nil:
			return fitCriterion{}, err
		case d != nil && f.isSet("budget"):
			return fitCriterion{}, errors.New("-device and -budget exclude each other: a device's limit is its usable memory")
		}
		return fitCriterion{device: d, budget: b.bytes()}, nil
	}
}

// settingFlags adds -amp, -half and -segments, the step's setting; the
// returned function reads them after parsing, failing when -amp and -half
// are both given.
func (f *flagSet) settingFlags() func() (setting, error) {
	amp := f.Bool("amp", false, "run the forward under autocast to float16 (train_dual.py's default)")
	half := f.Bool("half", false, "run the model in half precision (model.half())")
	seg := f.Int("segments", 0, "checkpoint the layers in `K` segments as checkpoint_sequential does (0: none)")
	var plan rangesValue
	f.Var(&plan, "checkpoint", "checkpoint these top-level layer `ranges`, inclusive, such as 0-5,9-12 (what onnxmem plan prints)")
	conf := f.allocConfFlag()
	return func() (setting, error) {
		switch {
		case *amp && *half:
			return setting{}, errors.New("-amp and -half exclude each other")
		case *seg < 0:
			return setting{}, errors.New("-segments must be 0 or more")
		case len(plan) > 0 && *seg > 1:
			return setting{}, errors.New("-segments and -checkpoint exclude each other: give segments or an explicit plan")
		}
		return conf(setting{AMP: *amp, Half: *half, Segments: *seg, Checkpoint: []onnxmem.Range(plan)})
	}
}

// stepFlags adds settingFlags' and trainFlags' flags: the whole setting
// of a model or train step, read by the returned function after parsing.
func (f *flagSet) stepFlags() func() (setting, error) {
	set, train := f.settingFlags(), f.trainFlags()
	return func() (setting, error) {
		st, err := set()
		if err != nil {
			return st, err
		}
		if st, err = train(st); err != nil {
			return st, err
		}
		return st, st.warmNeedsAMP()
	}
}

// allocConfFlag adds -alloc-conf, the caching allocator's options; the
// returned function, called after parsing, checks them and adds them to a
// setting.
func (f *flagSet) allocConfFlag() func(setting) (setting, error) {
	conf := f.String("alloc-conf", "", "the caching allocator's `options` as PYTORCH_CUDA_ALLOC_CONF takes them, such as\nexpandable_segments:True or max_split_size_mb:128 (default: PyTorch's defaults)")
	return func(st setting) (setting, error) {
		st.AllocConf = *conf
		if err := (onnxmem.Scenario{AllocConf: *conf}).Check(); err != nil {
			return st, errors.New(strings.TrimPrefix(err.Error(), "onnxmem: "))
		}
		return st, nil
	}
}

// trainFlags adds -train, -boxes, -optimizer, -ema and -warm-steps, which
// make the step a full training step of train_dual.py. The returned
// function, called after parsing, adds them to the setting read by
// settingFlags, failing when -boxes, -optimizer, -ema or -warm-steps come
// without -train or -train with -half.
func (f *flagSet) trainFlags() func(setting) (setting, error) {
	train := f.Bool("train", false, "simulate a full training step of the model family's script (YOLOv9: train_dual.py: batch upload,\nforward, its loss, backward, gradient clipping, optimizer step and EMA update; another family: cross-entropy on its logits)")
	boxes := f.Int64("boxes", onnxmem.DefaultBoxes, "`N` ground-truth boxes in each image of a -train step (0 or more)")
	opt := optimizerValue("SGD")
	f.Var(&opt, "optimizer", "`NAME` of the optimizer of a -train step: SGD, Adam, AdamW (YOLOv9: with amsgrad), Lion or none")
	ema := f.Bool("ema", true, "update an EMA copy of the model after the optimizer step of a -train step (-ema=false: none;\nYOLOv9's train_dual.py keeps one, the generic family's loop none)")
	f.ema = ema
	warm := f.Int("warm-steps", 0, "`N` iterations of the training loop before the measured -train step under float16 -amp, the last making\nthe optimizer's state, GradScaler skipping the others (default: "+strconv.Itoa(onnxmem.DefaultAMPWarmSteps)+"; a step without -amp runs 1)")
	return func(st setting) (setting, error) {
		if !*train {
			for _, name := range []string{"boxes", "optimizer", "ema", "warm-steps"} {
				if f.isSet(name) {
					return setting{}, fmt.Errorf("-%s applies to train steps: add -train", name)
				}
			}
			return st, nil
		}
		switch {
		case st.Half:
			return setting{}, errors.New("-half does not apply to -train: train_dual.py trains float32 parameters, with or without -amp")
		case *boxes < 0:
			return setting{}, errors.New("-boxes must be 0 or more")
		case f.isSet("warm-steps") && *warm < 1:
			return setting{}, errors.New("-warm-steps must be 1 or more: the last iteration makes the optimizer's state")
		}
		st.Train, st.Boxes, st.Optimizer, st.EMA, st.WarmSteps = true, *boxes, string(opt), *ema, *warm
		return st, nil
	}
}

// ddpFlags adds -gpus and -sync-bn, a training run's DistributedDataParallel
// (python -m torch.distributed.run --nproc_per_node N train_dual.py
// --batch B [--sync-bn]); the setting it returns runs them.
func (f *flagSet) ddpFlags() func(setting) (setting, error) {
	gpus := f.Int("gpus", 0, "train on `N` GPUs with DistributedDataParallel, as python -m torch.distributed.run --nproc_per_node N\ntrain_dual.py runs it: each rank at the batch / N, rank 0 with the EMA, the validation and the checkpoint\n(default 0: one process without DDP; 1: DDP on one GPU)")
	syncBN := f.Bool("sync-bn", false, "with -gpus, train_dual.py's --sync-bn (SyncBatchNorm: batch norm's bytes; measured over one GPU only)")
	return func(st setting) (setting, error) {
		switch {
		case *gpus < 0:
			return st, errors.New("-gpus must be 0 (one process without DDP) or more")
		case *syncBN && *gpus == 0:
			return st, errors.New("-sync-bn needs -gpus: SyncBatchNorm is DDP's")
		}
		st.GPUs, st.SyncBN = *gpus, *syncBN
		return st, nil
	}
}

// stepFlag adds -step, what a command simulates: the whole training run
// (run, the default for a family whose training script onnxmem runs), one
// iteration of it (train), the validation step (eval) or the bare model
// step (model).
func (f *flagSet) stepFlag() *string {
	v := stepValue("")
	f.Var(&v, "step", "what to simulate: `run` (the whole training run, the default for YOLOv9), train (one iteration),\neval (the validation step) or model (forward, sum(o.sum()), backward)")
	return (*string)(&v)
}

// stepValue is -step's flag.Value.
type stepValue string

func (v *stepValue) String() string { return string(*v) }

func (v *stepValue) Set(s string) error {
	switch s {
	case "run", "train", "eval", "model":
		*v = stepValue(s)
		return nil
	}
	return fmt.Errorf("want run, train, eval or model, not %q", s)
}

// script names the training script whose run a command simulates for m:
// train.py for GELAN (a single head), else train_dual.py. The name tells
// GELAN's built-in models and exports named after them; the simulated
// loss follows the head itself either way.
func script(m *onnxmem.Model) string {
	if strings.HasPrefix(strings.ToLower(cmpOr(m.Builtin, m.Name)), "gelan") {
		return "train.py"
	}
	return "train_dual.py"
}

// wantsRun reports whether a command answers for the whole training run:
// -step run, or no step named (named: -train, -eval, -half and the like)
// for a model whose family's training script onnxmem runs.
func wantsRun(m *onnxmem.Model, step string, named bool) bool {
	return step == "run" || step == "" && !named && hasRun(m)
}

// hasRun reports whether onnxmem runs m's family's training script, whose
// whole run is a command's default.
func hasRun(m *onnxmem.Model) bool { return m.Family == "yolov9" }

// evalFlags adds -eval and -eval-float, the validation step; the
// returned function, called after parsing, adds it to a setting, failing
// on the flags that do not apply to it.
func (f *flagSet) evalFlags() func(setting) (setting, error) {
	eval := f.Bool("eval", false, "simulate the validation step that train_dual.py runs at an epoch's end instead (val_dual.run: a half copy of\nthe model under no_grad with the head's decode; validation runs at twice the training batch)")
	float := f.Bool("eval-float", false, "with -eval, validate a float32 copy, as train_dual.py does when it trains without AMP")
	return func(st setting) (setting, error) {
		if !*eval {
			if *float {
				return st, errors.New("-eval-float applies to the validation step: add -eval")
			}
			return st, nil
		}
		for _, name := range []string{"amp", "half", "segments", "checkpoint", "train"} {
			if f.on(name) || (name == "segments" || name == "checkpoint") && f.isSet(name) {
				return st, fmt.Errorf("-%s does not apply to -eval: validation runs a copy of the model without gradients (-eval-float: in float32)", name)
			}
		}
		st.Eval, st.EvalFloat = true, *float
		return st, nil
	}
}

// optimizerValue is a flag.Value: an optimizer that schedule models, its
// name's case ignored (onnxmem.ParseOptimizer).
type optimizerValue string

func (o *optimizerValue) String() string { return string(*o) }

func (o *optimizerValue) Set(v string) error {
	opt, err := onnxmem.ParseOptimizer(v)
	if err != nil {
		return errors.New("want SGD, Adam, AdamW, Lion or none")
	}
	*o = optimizerValue(opt)
	return nil
}

// deviceFlag adds -device, a device profile's name. The returned function
// reads it after parsing: nil when it was not given, an error when the name
// is unknown.
func (f *flagSet) deviceFlag() func() (*onnxmem.Device, error) {
	name := f.String("device", "", "the card: a device profile's `NAME` (see onnxmem devices; A100-40GB, 4090 and h100 are read too) or its total memory such as 24GB or 23.5GiB, optionally +ctx=600MiB for its CUDA context; its total less the context is the allocator's limit")
	return func() (*onnxmem.Device, error) {
		if !f.isSet("device") {
			return nil, nil
		}
		d, err := onnxmem.ParseDevice(*name)
		if err != nil {
			return nil, errors.New(strings.TrimPrefix(err.Error(), "onnxmem: "))
		}
		return &d, nil
	}
}

// isSet reports whether the flag of a name was given on the command line.
func (f *flagSet) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

// svgFlag adds -svg.
func (f *flagSet) svgFlag(what string) *string {
	return f.String("svg", "", "write "+what+" as SVG to `file`")
}

// positive adds an integer flag that must be at least 1.
func (f *flagSet) positive(name string, def int64, usage string) *int64 {
	v := positiveInt(def)
	f.Var(&v, name, usage)
	return (*int64)(&v)
}

// positiveInt is a flag.Value: an integer of at least 1.
type positiveInt int64

func (p *positiveInt) String() string { return strconv.FormatInt(int64(*p), 10) }

func (p *positiveInt) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return errors.New("want an integer of at least 1")
	}
	*p = positiveInt(n)
	return nil
}

// batchList is a flag.Value: batch sizes, each at least 1, in the order given.
type batchList []int64

func (b *batchList) String() string {
	s := make([]string, len(*b))
	for i, v := range *b {
		s[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(s, ",")
}

func (b *batchList) Set(v string) error {
	var out batchList
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("batch size %q: want an integer of at least 1", f)
		}
		out = append(out, n)
	}
	*b = out
	return nil
}

// load reads the model a command names: an ONNX file, or, where no such file
// exists, a built-in model (onnxmem.Builtins) ("yolov9-c"; onnxmem models
// lists them). Every command loads through it.
func load(path string) (*onnxmem.Model, error) {
	switch {
	case builtin(path):
		return onnxmem.Builtin(path)
	case !fileExists(path) && !strings.ContainsAny(path, `/\.`):
		return nil, fmt.Errorf("onnxmem: %s is neither a file nor a built-in model (%s)", path, strings.Join(models.Names(), ", "))
	}
	return onnxmem.Load(path)
}

// builtin reports whether load reads path as a built-in model: no file has
// that name and a built-in model does.
func builtin(path string) bool {
	return slices.Contains(models.Names(), path) && !fileExists(path)
}

// fileExists reports whether path names an existing file or folder.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// source says where load reads path from, for people: the path, or that the
// model is built in and whether it was compared with its export.
func source(path string, m *onnxmem.Model) string {
	switch {
	case m != nil && m.Builtin != "":
		return path + ", an inference export: simulated as the built-in " + m.Builtin + ", which has its convolutions"
	case !builtin(path):
		return path
	case models.Checked(path):
		return "built in, node for node its export"
	}
	return "built in from the official configuration; no export to compare with"
}

// defaultModel is the built-in model a command simulates when it is given
// none.
var defaultModel = onnxmem.Builtins()[0]

// scenario is the fp32 model step at a batch size and image size.
func scenario(batch int64, img imageSize) onnxmem.Scenario {
	return onnxmem.Scenario{Batch: batch, Height: img.H, Width: img.W, Seq: img.Seq}
}

// inputOf describes a scenario's input: "image 640x640", or a text model's
// "sequence 512".
func inputOf(sc onnxmem.Scenario) string {
	if sc.Seq > 0 {
		return fmt.Sprintf("sequence %d", sc.Seq)
	}
	return fmt.Sprintf("image %dx%d", sc.Height, sc.Width)
}

// gib formats bytes as GiB with two decimals, for tables.
func gib(b int64) string {
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64)
}

// where says where a peak falls: its phase and top-level layer.
func where(r *onnxmem.Result) string {
	switch {
	case r.PeakPhase == "":
		return "-"
	case r.PeakLayer < 0:
		return r.PeakPhase
	}
	return fmt.Sprintf("%s, layer %d", r.PeakPhase, r.PeakLayer)
}

// layer formats a layer index, "-" for none.
func layer(l int) string {
	if l < 0 {
		return "-"
	}
	return strconv.Itoa(l)
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progress returns the callback Model.Sweep calls: one step of steps per
// batch size.
func progress(stderr io.Writer, verbose bool, what string, batches []int64) func(done, total int) {
	step := steps(stderr, verbose, what, len(batches))
	return func(done, _ int) { step(fmt.Sprintf("batch %d", batches[done-1])) }
}

// steps returns a callback to call once for each of total steps as it
// finishes, with a label saying what was done. Progress is shown when
// verbose is set or stderr is a terminal, and otherwise the callback does
// nothing. On a terminal it rewrites one line; elsewhere it writes one line
// per step. The callback may be called from several goroutines.
func steps(stderr io.Writer, verbose bool, what string, total int) func(label string) {
	tty := isTerminal(stderr)
	if !verbose && !tty {
		return func(string) {}
	}
	var mu sync.Mutex
	done := 0
	return func(label string) {
		mu.Lock()
		defer mu.Unlock()
		done++
		msg := fmt.Sprintf("onnxmem: %s: %s done (%d/%d)", what, label, done, total)
		switch {
		case !tty:
			fmt.Fprintln(stderr, msg)
		case done == total:
			fmt.Fprintf(stderr, "\r%s\x1b[K\n", msg)
		default:
			fmt.Fprintf(stderr, "\r%s\x1b[K", msg)
		}
	}
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// writeSVG writes a plot to path; an empty path writes nothing.
func writeSVG(path string, p *plot) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := p.render(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rangesValue is a flag.Value: checkpointed layer ranges, inclusive,
// "0-5,9-12" (a single layer is "7").
type rangesValue []onnxmem.Range

func (r *rangesValue) String() string { return rangesFlag(*r) }

func (r *rangesValue) Set(v string) error {
	rs, err := parseRanges(v)
	if err != nil {
		return err
	}
	*r = rs
	return nil
}

// maxLayer bounds the layer numbers -checkpoint takes, far beyond any
// model's (a model's own count is checked when it is simulated), so that
// a range's end stays an int.
const maxLayer = 1 << 30

// parseRanges reads "0-5,9-12": ranges of layers, inclusive, in order and
// disjoint.
func parseRanges(v string) ([]onnxmem.Range, error) {
	var out []onnxmem.Range
	for _, part := range strings.Split(v, ",") {
		a, b, isRange := strings.Cut(strings.TrimSpace(part), "-")
		from, err := strconv.Atoi(a)
		if err != nil || from < 0 {
			return nil, fmt.Errorf("range %q: want FIRST-LAST or LAYER, layers counted from 0", part)
		}
		to := from
		if isRange {
			if to, err = strconv.Atoi(b); err != nil || to < from {
				return nil, fmt.Errorf("range %q: want FIRST-LAST with LAST not below FIRST", part)
			}
		}
		if to >= maxLayer {
			return nil, fmt.Errorf("range %q: layer %d is beyond any model (at most %d)", part, to, maxLayer-1)
		}
		if n := len(out); n > 0 && from < out[n-1].To {
			return nil, fmt.Errorf("range %q overlaps or comes before the one before it: give ranges in order", part)
		}
		out = append(out, onnxmem.Range{From: from, To: to + 1})
	}
	return out, nil
}

// rangesFlag writes ranges as -checkpoint takes them.
func rangesFlag(rs []onnxmem.Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.From)
		if r.To-1 > r.From {
			parts[i] += "-" + strconv.Itoa(r.To-1)
		}
	}
	return strings.Join(parts, ",")
}
