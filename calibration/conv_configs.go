//go:build ignore

// Conv_configs writes the distinct convolutions that the built-in models run
// in a model step, at batch 1 to 64 on square images of 320 to 640 pixels (every 32), in float32
// and under AMP, for calibration/conv_sweep.py to measure. Each is
// [N, Cin, Cout, H, W, K, stride, groups, element size], sorted.
//
//	go run calibration/conv_configs.go -o calibration/results/conv_configs.json
//
// With -onnx, the exports named (comma-separated) instead, at batch 1 to
// 128 (powers of 2) on -img square images: the torchvision classifiers at
// 224 are
//
//	go run calibration/conv_configs.go -onnx ../shared/torchvision/resnet18-train.onnx,../shared/torchvision/mobilenet_v3_large-train.onnx -img 224 -o calibration/results/conv_configs_torchvision.json
//
// With -onnx and -channels-last, only the convolutions that the simulation
// runs channels-last (ConvCall.ChannelsLast: ConvNeXt's, after its
// LayerNorm2d), each with its padding as a tenth number, for
// conv_sweep.py --channels-last:
//
//	go run calibration/conv_configs.go -onnx calibration/results/tv/convnext_tiny-train.onnx,calibration/results/tv/convnext_small-train.onnx -channels-last -o calibration/results/conv_configs_cl.json
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

func main() {
	out := flag.String("o", "calibration/results/conv_configs.json", "output `file`")
	files := flag.String("onnx", "", "comma-separated ONNX `files` to take the convolutions of, in place of the built-in models")
	img := flag.Int64("img", 224, "the square image side for -onnx")
	only := flag.String("models", "", "comma-separated built-in `models` to take, in place of all of them")
	imgs := flag.String("imgs", "", "comma-separated square image `sides` for the built-in models, in place of 320 to 640 every 32")
	allBatches := flag.Bool("all-batches", false, "every batch from 1 to 64 for the built-in models, in place of the powers of two")
	batchList := flag.String("batches", "", "comma-separated `batches` for the built-in models, in place of the powers of two to 64")
	eval := flag.Bool("eval", false, "the built-in models' eval steps (the half model's forward), in place of their model steps")
	channelsLast := flag.Bool("channels-last", false, "with -onnx: only the channels-last convolutions, with their padding")
	rect := flag.Bool("rect", false, "the float16 convolutions of the built-in models' eval steps on the rectangular\nbatches of validation (long side 640 or 672, short side 384 to 576, both orientations) at batch 16, 32 and 64")
	flag.Parse()
	seen := map[[9]int64]bool{}
	seenCL := map[[10]int64]bool{}
	seenPad := map[[10]int64]bool{} // NCHW calls whose padding is not k/2
	if *rect {
		rectConfigs(seen)
	}
	if *files != "" {
		for _, f := range strings.Split(*files, ",") {
			m, err := sim.Load(f)
			if err != nil {
				log.Fatal(err)
			}
			for b := int64(1); b <= 128; b *= 2 {
				s, err := m.Graph.Infer(ir.Binding{Batch: b, Height: *img, Width: *img})
				if err != nil {
					log.Fatal(err)
				}
				for _, prec := range []schedule.Precision{schedule.FP32, schedule.AMP} {
					cfg := schedule.Config{Precision: prec, Workspace: func(c schedule.ConvCall) int64 {
						switch {
						case schedule.IsReduction(c.Which):
						case *channelsLast && c.ChannelsLast:
							pad := ((c.OutH-1)*c.StrideH + c.KH - c.H) / 2
							seenCL[[10]int64{c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, c.Groups, c.ElemSize, pad}] = true
						case *channelsLast || c.DilationH > 1 || c.DilationW > 1 || c.PadH != c.PadW:
						case c.PadH != c.KH/2:
							// Another padding than k/2 (AlexNet's first conv):
							// the tenth number, as conv_sweep.py takes it.
							seenPad[[10]int64{c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, c.Groups, c.ElemSize, c.PadH}] = true
						default:
							seen[[9]int64{c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, c.Groups, c.ElemSize}] = true
						}
						return 0
					}}
					if _, err := schedule.Build(m.Graph, s, cfg); err != nil {
						log.Fatal(err)
					}
				}
			}
		}
	}
	if *channelsLast || len(seenPad) > 0 {
		var rows [][10]int64
		for k := range seenCL {
			rows = append(rows, k)
		}
		for k := range seenPad {
			rows = append(rows, k)
		}
		if !*channelsLast {
			for k := range seen {
				rows = append(rows, [10]int64(append(k[:], k[5]/2)))
			}
		}
		slices.SortFunc(rows, func(a, b [10]int64) int {
			for _, i := range []int{8, 1, 2, 5, 6, 7, 3, 4, 9, 0} {
				if c := cmp.Compare(a[i], b[i]); c != 0 {
					return c
				}
			}
			return 0
		})
		write(*out, rows)
		return
	}
	names := models.Names()
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	var sides []int64
	for img := int64(320); img <= 640; img += 32 {
		sides = append(sides, img)
	}
	if *imgs != "" {
		sides = nil
		for _, f := range strings.Split(*imgs, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				log.Fatalf("-imgs %q: %v", *imgs, err)
			}
			sides = append(sides, v)
		}
	}
	batches := []int64{1, 2, 4, 8, 16, 32, 64}
	if *allBatches {
		batches = nil
		for b := int64(1); b <= 64; b++ {
			batches = append(batches, b)
		}
	}
	if *batchList != "" {
		batches = nil
		for _, f := range strings.Split(*batchList, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				log.Fatalf("-batches %q: %v", *batchList, err)
			}
			batches = append(batches, v)
		}
	}
	cfgs := []schedule.Config{{Precision: schedule.FP32}, {Precision: schedule.AMP}}
	if *eval {
		cfgs = []schedule.Config{{Eval: &schedule.Eval{}}}
	}
	for _, name := range names {
		if *files != "" || *rect {
			break
		}
		m, err := sim.Builtin(name)
		if err != nil {
			log.Fatal(err)
		}
		for _, img := range sides {
			for _, b := range batches {
				s, err := m.Graph.Infer(ir.Binding{Batch: b, Height: img, Width: img})
				if err != nil {
					log.Fatal(err)
				}
				for _, cfg := range cfgs {
					cfg.Workspace = func(c schedule.ConvCall) int64 {
						if !schedule.IsReduction(c.Which) {
							seen[[9]int64{c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, c.Groups, c.ElemSize}] = true
						}
						return 0
					}
					if _, err := schedule.Build(m.Graph, s, cfg); err != nil {
						log.Fatal(err)
					}
				}
			}
		}
	}
	var rows [][9]int64
	for k := range seen {
		rows = append(rows, k)
	}
	// Sorted by element size, then channels, kernel, stride, groups, size and
	// batch: deterministic, and the sweep's slow large calls come last.
	slices.SortFunc(rows, func(a, b [9]int64) int {
		for _, i := range []int{8, 1, 2, 5, 6, 7, 3, 4, 0} {
			if c := cmp.Compare(a[i], b[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	write(*out, rows)
}

// write writes the rows as JSON to file out.
func write[T any](out string, rows []T) {
	bs, err := json.Marshal(rows)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(out, append(bs, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d convolutions", len(rows))
}

// rectConfigs adds the convolutions of the eval steps of every built-in
// model on rectangular validation batches.
func rectConfigs(seen map[[9]int64]bool) {
	for _, name := range models.Names() {
		m, err := sim.Builtin(name)
		if err != nil {
			log.Fatal(err)
		}
		for _, long := range []int64{640, 672} {
			for _, short := range []int64{384, 448, 480, 512, 544, 576} {
				for _, hw := range [][2]int64{{short, long}, {long, short}} {
					for _, b := range []int64{16, 32, 64} {
						s, err := m.Graph.Infer(ir.Binding{Batch: b, Height: hw[0], Width: hw[1]})
						if err != nil {
							log.Fatal(err)
						}
						cfg := schedule.Config{Eval: &schedule.Eval{}, Workspace: func(c schedule.ConvCall) int64 {
							seen[[9]int64{c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, c.Groups, c.ElemSize}] = true
							return 0
						}}
						if _, err := schedule.Build(m.Graph, s, cfg); err != nil {
							log.Fatal(err)
						}
					}
				}
			}
		}
	}
}
