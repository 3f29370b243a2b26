package dataset

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Box is one label of an image: its center and size, normalized to the
// image's width and height, as a YOLO label file holds them.
type Box struct{ X, Y, W, H float64 }

// Hyp is what of hyp.scratch-high.yaml decides how many boxes a training
// image carries: random_perspective's translate and scale, and mixup's
// probability (degrees, shear and perspective are 0 there, mosaic 1,
// copy_paste a no-op without segments).
type Hyp struct{ Translate, Scale, Mixup float64 }

// ScratchHigh is hyp.scratch-high.yaml's, train_dual.py's default.
var ScratchHigh = Hyp{Translate: 0.1, Scale: 0.9, Mixup: 0.15}

// Mosaic draws the boxes that LoadImagesAndLabels.__getitem__ gives a
// training image: load_mosaic of the image and three drawn at random (with
// replacement), placed around a random center of a 2s×2s canvas, their
// boxes clipped to it; random_perspective's scale and translation to the
// s×s image, each box kept when box_candidates keeps it (wider and higher
// than 2 pixels, at least a tenth of its area, an aspect ratio under
// 100); and with probability Mixup a second mosaic's boxes beside. It
// returns their count. labels[i] are image i's boxes, sizes[i] its width
// and height; s is the image size (640).
//
// Worked example: an image of 8 boxes and three drawn ones of 8 each put
// 32 boxes on the canvas; a scale of 0.5 and a center near the canvas's
// middle keep nearly all of them in the s×s crop, a scale of 1.8 crops
// away most of three quadrants. Over a COCO-like dataset of 8 boxes an
// image, the counts average about 18, and the densest image of a batch of
// 16 carries about 70 (calibration/train_data.py measured 18.4 and 70).
//
// The draws follow the official code's, not its generator: Python's
// random and numpy's streams are not reproduced, so the counts are a
// sample of the same distribution, not the same sample.
func Mosaic(labels [][]Box, sizes [][2]int64, index int, s int64, hyp Hyp, rng *rand.Rand) int {
	return mosaicMixup(labels, sizes, index, s, hyp, rng, nil)
}

// xyxy is a box's corners in pixels.
type xyxy struct{ x1, y1, x2, y2 float32 }

// mosaicMixup is Mosaic, with buf as scratch space for the boxes.
func mosaicMixup(labels [][]Box, sizes [][2]int64, index int, s int64, hyp Hyp, rng *rand.Rand, buf *[]xyxy) int {
	if buf == nil {
		buf = new([]xyxy)
	}
	n := mosaic(labels, sizes, index, s, hyp, rng, buf)
	if rng.Float64() < hyp.Mixup {
		n += mosaic(labels, sizes, rng.IntN(len(labels)), s, hyp, rng, buf)
	}
	return n
}

// mosaic is load_mosaic's count of boxes, its draws from rng.
func mosaic(labels [][]Box, sizes [][2]int64, index int, s int64, hyp Hyp, rng *rand.Rand, buf *[]xyxy) int {
	uniform := func(a, b float64) float64 { return a + (b-a)*rng.Float64() }
	yc := int64(uniform(float64(s)/2, 3*float64(s)/2))
	xc := int64(uniform(float64(s)/2, 3*float64(s)/2))
	indices := [4]int{index, rng.IntN(len(labels)), rng.IntN(len(labels)), rng.IntN(len(labels))}
	rng.Shuffle(len(indices), func(i, j int) { indices[i], indices[j] = indices[j], indices[i] })
	sc := uniform(1-hyp.Scale, 1+hyp.Scale)
	tx := uniform(0.5-hyp.Translate, 0.5+hyp.Translate) * float64(s)
	ty := uniform(0.5-hyp.Translate, 0.5+hyp.Translate) * float64(s)
	return mosaicBoxes(labels, sizes, indices, xc, yc, sc, tx, ty, s, buf)
}

// mosaicBoxes counts the boxes that load_mosaic keeps of the four images
// indices placed around the center (xc, yc) of the 2s×2s canvas and
// random_perspective's scale sc and translation (tx, ty). The labels are
// float32 as the dataloader's cache holds them, and computed in float32
// up to the canvas's clip; random_perspective's matrix and box_candidates'
// test are float64 as numpy computes them, of box1 in float32: a box on
// the edge of a threshold is kept or dropped as there.
func mosaicBoxes(labels [][]Box, sizes [][2]int64, indices [4]int, xc, yc int64, sc, tx, ty float64, s int64, buf *[]xyxy) int {
	boxes := (*buf)[:0]
	defer func() { *buf = boxes[:0] }()
	two := float32(2 * s)
	clip := func(v float32) float32 { return min(max(v, 0), two) }
	for q, idx := range indices {
		w0, h0 := sizes[idx][0], sizes[idx][1]
		r := float64(s) / float64(max(w0, h0))
		w, h := w0, h0
		if r != 1 {
			w, h = int64(float64(w0)*r), int64(float64(h0)*r)
		}
		var x1a, y1a, x1b, y1b int64
		switch q {
		case 0: // top left
			x1a, y1a = max(xc-w, 0), max(yc-h, 0)
			x1b, y1b = w-(xc-x1a), h-(yc-y1a)
		case 1: // top right
			x1a, y1a = xc, max(yc-h, 0)
			x1b, y1b = 0, h-(yc-y1a)
		case 2: // bottom left
			x1a, y1a = max(xc-w, 0), yc
			x1b, y1b = w-(xc-x1a), 0
		case 3: // bottom right
			x1a, y1a, x1b, y1b = xc, yc, 0, 0
		}
		fw, fh, padw, padh := float32(w), float32(h), float32(x1a-x1b), float32(y1a-y1b)
		for _, b := range labels[idx] {
			x, y, bw, bh := float32(b.X), float32(b.Y), float32(b.W), float32(b.H)
			boxes = append(boxes, xyxy{
				clip(float32(fw*float32(x-bw/2)) + padw), clip(float32(fh*float32(y-bh/2)) + padh),
				clip(float32(fw*float32(x+bw/2)) + padw), clip(float32(fh*float32(y+bh/2)) + padh)})
		}
	}
	// random_perspective: M = T·S·R·P·C with no rotation, shear or
	// perspective maps (x, y) to (sc·x + (tx − sc·s), …) on the s×s
	// output.
	side := float64(s)
	mx, my := float64(-side*sc)+tx, float64(-side*sc)+ty
	sc32 := float32(sc)
	const eps = 1e-16
	kept := 0
	for _, b := range boxes {
		x1 := min(max(float64(float64(b.x1)*sc)+mx, 0), side)
		x2 := min(max(float64(float64(b.x2)*sc)+mx, 0), side)
		y1 := min(max(float64(float64(b.y1)*sc)+my, 0), side)
		y2 := min(max(float64(float64(b.y2)*sc)+my, 0), side)
		w1 := float32(b.x2*sc32) - float32(b.x1*sc32)
		h1 := float32(b.y2*sc32) - float32(b.y1*sc32)
		a1 := float32(w1*h1) + eps
		w2, h2 := x2-x1, y2-y1
		ar := math.Max(w2/(h2+eps), h2/(w2+eps))
		if w2 > 2 && h2 > 2 && float64(w2*h2)/float64(a1) > 0.1 && ar < 100 {
			kept++
		}
	}
	return kept
}

// EpochMaxima returns, for one epoch of training at batch size batch, the
// most boxes an image of each batch carries (what the loss pads every
// image to), the batches in the shuffled order of the epoch, the last
// batch short when the images do not divide: Mosaic's counts of a random
// permutation of the images.
func EpochMaxima(labels [][]Box, sizes [][2]int64, batch int, s int64, hyp Hyp, rng *rand.Rand) []int64 {
	var out []int64
	for _, counts := range Epoch(labels, sizes, batch, s, hyp, rng) {
		out = append(out, slices.Max(counts))
	}
	return out
}

// Epoch returns the box counts of every image of every batch of one epoch
// at batch size batch: Mosaic's counts of a random permutation of the
// images (the dataloader's shuffle), batch at a time, the last batch short
// when the images do not divide.
func Epoch(labels [][]Box, sizes [][2]int64, batch int, s int64, hyp Hyp, rng *rand.Rand) [][]int64 {
	return Group(EpochCounts(labels, sizes, s, hyp, rng), batch)
}

// EpochCounts returns Mosaic's counts of one epoch's images in the order
// of a random permutation (the dataloader's shuffle), which the batch size
// only groups (Group): Epoch is Group(EpochCounts(…), batch) of the same
// draws.
func EpochCounts(labels [][]Box, sizes [][2]int64, s int64, hyp Hyp, rng *rand.Rand) []int64 {
	order := rng.Perm(len(labels))
	out := make([]int64, len(order))
	var buf []xyxy
	for i, idx := range order {
		out[i] = int64(mosaicMixup(labels, sizes, idx, s, hyp, rng, &buf))
	}
	return out
}

// Group returns counts batch at a time, the last group short when they do
// not divide.
func Group(counts []int64, batch int) [][]int64 {
	var out [][]int64
	for start := 0; start < len(counts); start += batch {
		out = append(out, counts[start:min(start+batch, len(counts)):min(start+batch, len(counts))])
	}
	return out
}
