package dataset

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
)

// The built-in dataset that stands for COCO 2017 when a run names no data
// file. Its size is COCO 2017's: 118,287 training and 5,000 validation
// images of 80 classes (cocodataset.org). Its images' sizes, box counts and
// boxes are drawn as calibration/train_data.py draws the synthetic datasets
// on which the official code was measured (TestDataRuns): a mix of COCO's
// commonest sizes (640×480 the most), 1% of images without boxes, 6% dense
// (25 to 90 boxes), the rest geometric of mean 6; box sides log-uniform
// from 2% to 90% of the image. That is an assumption about COCO, not its
// histogram: a run on COCO itself takes -data coco.yaml.
//
// Worked example: an image carries 9.0 boxes on average; at batch 16 an
// epoch is 7,393 iterations, mosaic and mixup put 20.4 boxes on a training
// image on average, the densest image of a batch carries 74 at the median
// batch, 161 at the 99th percentile and 248 in the densest (seed 1).
const (
	COCOTrainImages = 118287
	COCOValImages   = 5000
	COCOClasses     = 80
	// COCOName is how outputs name the built-in dataset.
	COCOName = "COCO-like (built in)"
)

// cocoSizes are calibration/train_data.py's SIZES: image sizes (width,
// height) and their shares, in hundredths.
var cocoSizes = []struct {
	w, h  int64
	share int
}{
	{640, 480, 34}, {480, 640, 12}, {640, 427, 16}, {427, 640, 7}, {640, 640, 5},
	{500, 375, 6}, {375, 500, 3}, {640, 360, 7}, {612, 612, 4}, {640, 512, 6},
}

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
			Train: cocoImages(COCOTrainImages, rng),
			Val:   cocoImages(COCOValImages, rng),
		}
	})
	return cocoSet
}

// cocoImages draws n images as make_dataset draws them.
func cocoImages(n int, rng *rand.Rand) []Image {
	out := make([]Image, n)
	for i := range out {
		u, acc := rng.IntN(100), 0
		for _, s := range cocoSizes {
			if acc += s.share; u < acc {
				out[i].W, out[i].H = s.w, s.h
				break
			}
		}
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
