package dataset

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
)

// The built-in dataset that stands for COCO 2017 when a run names no data
// file. Its size is COCO 2017's: 118,287 training and 5,000 validation
// images of 80 classes (cocodataset.org). Its images' sizes are COCO's own:
// the validation images take the 5,000 sizes of a 5,000-image sample of
// COCO's validation images, and the training images are drawn from the
// sizes of COCO's 117,264 labelled training images (coco_sizes.go, made by
// calibration/coco_sizes.go from the lists that ultralytics/yolov3 kept,
// which says which). Its box counts and boxes are an assumption: drawn as
// calibration/train_data.py draws the synthetic datasets on which the
// official code was measured (TestDataRuns), 1% of images without boxes,
// 6% dense (25 to 90 boxes), the rest geometric of mean 6; box sides
// log-uniform from 2% to 90% of the image. COCO's own label files are not
// at hand: a run on COCO itself takes -data coco.yaml.
//
// Worked example: an image carries 9.0 boxes on average; at batch 16 an
// epoch is 7,393 iterations, mosaic and mixup put 20.7 boxes on a training
// image on average, the densest image of a batch carries 76 at the median
// batch, 165 at the 99th percentile and 236 in the densest (seed 1;
// TestCOCOLikeWorkedExample).
const (
	COCOTrainImages = 118287
	COCOValImages   = 5000
	COCOClasses     = 80
	// COCOName is how outputs name the built-in dataset.
	COCOName = "COCO-like (built in)"
)

// sizeCount is one image size of a COCO split, width and height in
// pixels, and how many of the split's images have it.
type sizeCount struct{ w, h, n int64 }

var (
	cocoOnce sync.Once
	cocoSet  *Set
)

// COCOLike returns the built-in COCO-like dataset, the same on every call
// (drawn once from a fixed seed); callers must not modify it.
func COCOLike() *Set {
	cocoOnce.Do(func() {
		rng := rand.New(rand.NewPCG(2017, 0x636f636f))
		names := make([]string, COCOClasses)
		for i := range names {
			names[i] = "class" + strconv.Itoa(i)
		}
		cocoSet = &Set{
			Data:  &Data{Root: COCOName, Train: []string{"train2017"}, Val: []string{"val2017"}, NC: COCOClasses, Names: names},
			Train: cocoImages(drawSizes(cocoTrainSizes, COCOTrainImages, rng), rng),
			Val:   cocoImages(spreadSizes(cocoValSizes), rng),
		}
	})
	return cocoSet
}

// drawSizes draws n image sizes from table's shares.
func drawSizes(table []sizeCount, n int, rng *rand.Rand) [][2]int64 {
	var total int64
	for _, s := range table {
		total += s.n
	}
	out := make([][2]int64, n)
	for i := range out {
		u := rng.Int64N(total)
		for _, s := range table {
			if u -= s.n; u < 0 {
				out[i] = [2]int64{s.w, s.h}
				break
			}
		}
	}
	return out
}

// spreadSizes returns table's sizes, each as many times as its count, the
// table's order (the dataloader sorts them by aspect ratio, and which of
// one size carries which boxes is drawn).
func spreadSizes(table []sizeCount) [][2]int64 {
	var out [][2]int64
	for _, s := range table {
		for range s.n {
			out = append(out, [2]int64{s.w, s.h})
		}
	}
	return out
}

// cocoImages gives each size an image, its boxes drawn as
// calibration/train_data.py's make_dataset draws them.
func cocoImages(sizes [][2]int64, rng *rand.Rand) []Image {
	out := make([]Image, len(sizes))
	for i := range out {
		out[i].W, out[i].H = sizes[i][0], sizes[i][1]
		k := cocoBoxCount(rng)
		boxes := make([]Box, k)
		for j := range boxes {
			bw := math.Exp(math.Log(0.02) + (math.Log(0.9)-math.Log(0.02))*rng.Float64())
			bh := min(max(bw*math.Exp(0.5*rng.NormFloat64()), 0.01), 0.95)
			boxes[j] = Box{X: bw/2 + (1-bw)*rng.Float64(), Y: bh/2 + (1-bh)*rng.Float64(), W: bw, H: bh}
		}
		out[i].Path = "coco/" + strconv.Itoa(i)
		out[i].Boxes, out[i].Labels = int64(k), boxes
	}
	return out
}

// cocoBoxCount is box_count: 1% none, 6% from 25 to 90, else geometric on
// 1, 2, … with mean 6.
func cocoBoxCount(rng *rand.Rand) int {
	u := rng.Float64()
	switch {
	case u < 0.01:
		return 0
	case u < 0.07:
		return 25 + rng.IntN(66)
	}
	// numpy's geometric(p): the trials up to the first success.
	return 1 + int(math.Floor(math.Log(1-rng.Float64())/math.Log(1-1/6.0)))
}
