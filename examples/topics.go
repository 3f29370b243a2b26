package examples

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// The notebook-style topics: each answers one question about YOLOv9's
// training memory on the built-in models, prints its table and ends with
// the conclusion the numbers give (computed, never typed in). The programs
// under examples/<topic>/ run them; TestTopics checks their output against
// examples/<topic>/output.txt.

// Topic is one notebook-style example.
type Topic struct {
	Name, Question string
	Run            func(w io.Writer) error
}

// Topics lists the examples in reading order.
func Topics() []Topic {
	return []Topic{
		{"peak_vs_batch", "How does the peak grow with the batch, what does AMP save, and where does the peak fall?", PeakVsBatch},
		{"segments", "What do 1 to 8 checkpoint segments save, and what do they cost in recomputation?", Segments},
		{"img_vs_maxbatch", "How large a batch fits a 24 GB card at each image size?", ImgVsMaxBatch},
		{"breakdown", "What is a train step's peak made of?", Breakdown},
		{"validation", "What does validation at twice the batch cost next to training?", Validation},
		{"whatif", "What if gelan were wider, deeper, or had more classes?", WhatIf},
		{"gpus", "What does each card hold when the batch is spread over several GPUs with DDP?", GPUs},
	}
}

func gib(n int64) string { return fmt.Sprintf("%.2f", float64(n)/(1<<30)) }

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func builtin(name string) (*onnxmem.Model, error) { return onnxmem.Builtin(name) }

// PeakVsBatch simulates the model steps of four sizes of YOLOv9 at 640, in
// fp32 and under AMP, at batch 8, 16 and 32.
func PeakVsBatch(w io.Writer) error {
	tw := table(w)
	fmt.Fprintln(tw, "model\tbatch\tfp32 GiB\tamp GiB\tAMP saves\tamp peak in\t")
	lo, hi := 100.0, 0.0
	for _, name := range []string{"yolov9-t", "yolov9-s", "yolov9-c", "yolov9-e"} {
		m, err := builtin(name)
		if err != nil {
			return err
		}
		for _, b := range []int64{8, 16, 32} {
			sc := onnxmem.Scenario{Batch: b}
			f, err := m.Simulate(sc)
			if err != nil {
				return err
			}
			sc.AMP = true
			a, err := m.Simulate(sc)
			if err != nil {
				return err
			}
			save := 100 * float64(f.Peak-a.Peak) / float64(f.Peak)
			lo, hi = min(lo, save), max(hi, save)
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f%%\t%s, layer %d\t\n", name, b, gib(f.Peak), gib(a.Peak), save, a.PeakPhase, a.PeakLayer)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nThe peak grows in proportion to the batch; AMP saves %.0f%% to %.0f%% of it, since every activation is stored in float16.\n", lo, hi)
	return err
}

// Segments runs yolov9-c's model step at batch 16 under AMP with 1 to 8
// checkpoint_sequential segments.
func Segments(w io.Writer) error {
	m, err := builtin("yolov9-c")
	if err != nil {
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "segments\tpeak GiB\tsaved\trecomputed\tsaved per % recomputed\t")
	var base int64
	bestK, best := 0, 0.0
	for k := 1; k <= 8; k++ {
		sc := onnxmem.Scenario{AMP: true, Segments: k}
		r, err := m.Simulate(sc)
		if err != nil {
			return err
		}
		c, err := m.Cost(sc)
		if err != nil {
			return err
		}
		if k == 1 {
			base = r.Peak
		}
		saved := 100 * float64(base-r.Peak) / float64(base)
		extra := 100 * c.Overhead()
		ratio := "-"
		if extra > 0 {
			ratio = fmt.Sprintf("%.2f", saved/extra)
			if saved/extra > best {
				bestK, best = k, saved/extra
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f%%\t%.0f%%\t%s\t\n", k, gib(r.Peak), saved, extra, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\n%d segments buy the most memory per recomputed FLOP (%.2f%% of the peak per 1%% more arithmetic); onnxmem plan finds cheaper plans for a given limit.\n", bestK, best)
	return err
}

// ImgVsMaxBatch finds the largest batch of yolov9-s's train step under AMP
// on an RTX 4090 at image sizes from 320 to 640.
func ImgVsMaxBatch(w io.Writer) error {
	m, err := builtin("yolov9-s")
	if err != nil {
		return err
	}
	d, err := onnxmem.ParseDevice("rtx4090")
	if err != nil {
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "image\tmax batch\treserved GiB at it\t")
	var first, last int64
	for _, img := range []int64{320, 416, 512, 640} {
		n, r, err := m.MaxBatch(onnxmem.Scenario{Height: img, Width: img, Step: onnxmem.TrainStep, AMP: true, Device: d.Name}, 0)
		if err != nil {
			return err
		}
		if first == 0 {
			first = n
		}
		last = n
		res := "-"
		if r != nil {
			res = gib(r.PeakReserved)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t\n", img, n, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nOn %s (%s GiB usable), going from 320 to 640 pixels divides the largest batch by %.1f: memory follows the pixels, four times as many.\n", d.Name, gib(d.Usable()), float64(first)/float64(max(last, 1)))
	return err
}

// Breakdown explains the peak of yolov9-c's train step at batch 16 under AMP.
func Breakdown(w io.Writer) error {
	m, err := builtin("yolov9-c")
	if err != nil {
		return err
	}
	ex, err := m.Explain(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true})
	if err != nil {
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "GiB\tshare\t  alive at the peak")
	for _, k := range ex.ByKind {
		fmt.Fprintf(tw, "%s\t%.1f%%\t  %s\n", gib(k.Bytes), 100*float64(k.Bytes)/float64(ex.Result.Peak), k.Kind)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	top := ex.ByKind[0]
	_, err = fmt.Fprintf(w, "\nThe peak (%s GiB, in the %s) is %.0f%% %s: the model, its EMA copy and the optimizer state together are %.1f%%.\n",
		gib(ex.Result.Peak), ex.Result.PeakPhase, 100*float64(top.Bytes)/float64(ex.Result.Peak), top.Kind, 100*float64(kindBytes(ex, "parameters")+kindBytes(ex, "model copy")+kindBytes(ex, "optimizer state"))/float64(ex.Result.Peak))
	return err
}

func kindBytes(ex *onnxmem.Explanation, kind string) int64 {
	for _, k := range ex.ByKind {
		if k.Kind == kind {
			return k.Bytes
		}
	}
	return 0
}

// Validation compares yolov9-c's train step at batch 16 under AMP with its
// validation step at batch 32, and a run with and without validation.
func Validation(w io.Writer) error {
	m, err := builtin("yolov9-c")
	if err != nil {
		return err
	}
	train, err := m.Simulate(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true})
	if err != nil {
		return err
	}
	val, err := m.Simulate(onnxmem.Scenario{Batch: 32, Step: onnxmem.EvalStep})
	if err != nil {
		return err
	}
	runs := [2]*onnxmem.RunResult{}
	for i, images := range []int64{0, 128} {
		ev, err := m.PlanRun(onnxmem.RunPlan{Epochs: 1, Iterations: 3, Batch: 16, Height: 640, Width: 640, ValImages: images, MeanBoxes: 7.3, Seed: 1})
		if err != nil {
			return err
		}
		if runs[i], err = m.Run(onnxmem.Scenario{AMP: true}, ev); err != nil {
			return err
		}
	}
	tw := table(w)
	fmt.Fprintln(tw, "\tpeak GiB\treserved GiB\t")
	fmt.Fprintf(tw, "train step, batch 16\t%s\t%s\t\n", gib(train.Peak), gib(train.PeakReserved))
	fmt.Fprintf(tw, "validation step, batch 32\t%s\t%s\t\n", gib(val.Peak), gib(val.PeakReserved))
	fmt.Fprintf(tw, "run without validation\t%s\t%s\t\n", gib(runs[0].Peak), gib(runs[0].PeakReserved))
	fmt.Fprintf(tw, "run with 128 images validated\t%s\t%s\t\n", gib(runs[1].Peak), gib(runs[1].PeakReserved))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nValidation at twice the batch needs %.0f%% of a train step's peak, without gradients or saved activations; in a run it adds %s GiB to the reserved peak.\n",
		100*float64(val.Peak)/float64(train.Peak), gib(runs[1].PeakReserved-runs[0].PeakReserved))
	return err
}

// WhatIf varies gelan-c's width, depth and classes and simulates its train
// step (train.py) at batch 16 under AMP.
func WhatIf(w io.Writer) error {
	tw := table(w)
	fmt.Fprintln(tw, "width\tdepth\tclasses\tparameters (M)\tpeak GiB\tagainst gelan-c\t")
	var base int64
	type knob struct {
		name string
		o    models.Options
	}
	moved := map[string]float64{}
	for _, k := range []knob{{"", models.Options{}}, {"width", models.Options{Width: 0.5}}, {"width", models.Options{Width: 1.5}},
		{"depth", models.Options{Depth: 2}}, {"depth", models.Options{Depth: 3}}, {"classes", models.Options{Classes: 20}}, {"classes", models.Options{Classes: 365}}} {
		data, err := models.Build("gelan-c", k.o)
		if err != nil {
			return err
		}
		m, err := onnxmem.LoadBytes("gelan-c", data)
		if err != nil {
			return err
		}
		r, err := m.Simulate(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true})
		if err != nil {
			return err
		}
		fp, err := m.Footprint()
		if err != nil {
			return err
		}
		p := fp.Trainable
		if base == 0 {
			base = r.Peak
		}
		or := func(v, def float64) float64 {
			if v == 0 {
				return def
			}
			return v
		}
		change := 100 * float64(r.Peak-base) / float64(base)
		if k.name != "" {
			moved[k.name] = max(moved[k.name], abs(change))
		}
		fmt.Fprintf(tw, "%.1f\t%.0f\t%.0f\t%.1f\t%s\t%+.0f%%\t\n", or(k.o.Width, 1), or(k.o.Depth, 1), or(float64(k.o.Classes), 80), float64(p)/1e6, gib(r.Peak), change)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	most := "width"
	for _, k := range []string{"depth", "classes"} {
		if moved[k] > moved[most] {
			most = k
		}
	}
	_, err := fmt.Fprintf(w, "\nOf these knobs %s moves the peak most (up to %.0f%%); depth up to %.0f%%, the classes up to %.0f%%: width scales every activation's channels, depth adds blocks whose activations are saved, classes widen only the head and the loss.\n",
		most, moved[most], moved["depth"], moved["classes"])
	return err
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// GPUs spreads yolov9-c's training run at a total batch of 64 over 1 to 8
// GPUs, as python -m torch.distributed.run --nproc_per_node N train_dual.py
// --batch 64 runs it (one process without DDP for the first row): each
// rank's share, rank 0's peaks (it alone keeps the EMA, validates and
// saves) and the other ranks', on a short run of 20 iterations, a
// validation of 128 images and a checkpoint save.
func GPUs(w io.Writer) error {
	m, err := builtin("yolov9-c")
	if err != nil {
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "GPUs	DDP	batch a rank	rank 0 peak GiB	rank 0 reserved GiB	others' peak GiB	NCCL GiB	")
	var single, eight *onnxmem.RunResult
	for _, n := range []int{0, 1, 2, 4, 8} {
		ranks := max(n, 1)
		plan := onnxmem.RunPlan{Epochs: 1, Iterations: 20, Batch: int64(64 / ranks), Height: 640, Width: 640,
			ValImages: 128, MeanBoxes: 7.3, Seed: 1, GPUs: n}
		events, err := m.PlanRun(plan)
		if err != nil {
			return err
		}
		r, err := m.Run(onnxmem.Scenario{Batch: 64, AMP: true, GPUs: n}, events)
		if err != nil {
			return err
		}
		others := "-"
		if r.Others != nil {
			others = gib(r.Others.Peak)
		}
		ddp := "no"
		if n > 0 {
			ddp = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", ranks, ddp, 64/ranks, gib(r.Peak), gib(r.PeakReserved), others, gib(r.NCCL))
		switch n {
		case 0:
			single = r
		case 8:
			eight = r
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nEight GPUs take rank 0's peak from %s to %s GiB, %.0f%% of one card's at the whole batch: the parameters, the optimizer's state, the EMA and DDP's gradient bucket stay whole on every card, and NCCL takes %s GiB beside the allocator; rank 0 needs %s GiB more than the others for the EMA and the validation.\n",
		gib(single.Peak), gib(eight.Peak), 100*float64(eight.Peak)/float64(single.Peak), gib(eight.NCCL), gib(eight.Peak-eight.Others.Peak))
	return err
}
