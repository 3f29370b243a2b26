package dataset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCOCOLike checks the built-in dataset: COCO 2017's image counts, the
// same draw on every call, COCO's image sizes (the validation split's
// exactly, the training split's shares), train_data.py's shares of counts.
func TestCOCOLike(t *testing.T) {
	s := COCOLike()
	if s != COCOLike() {
		t.Fatal("COCOLike draws anew on a second call")
	}
	if len(s.Train) != COCOTrainImages || len(s.Val) != COCOValImages || s.Data.NC != COCOClasses {
		t.Fatalf("%d training and %d validation images, nc %d: want COCO 2017's %d, %d and %d",
			len(s.Train), len(s.Val), s.Data.NC, COCOTrainImages, COCOValImages, COCOClasses)
	}
	var none, dense, boxes int
	landscape := 0
	for _, im := range s.Train {
		if int(im.Boxes) != len(im.Labels) {
			t.Fatalf("%s: %d boxes, %d labels", im.Path, im.Boxes, len(im.Labels))
		}
		boxes += len(im.Labels)
		switch {
		case im.Boxes == 0:
			none++
		case im.Boxes >= 25 && im.Boxes <= 90:
			dense++
		}
		if im.W == 640 && im.H == 480 {
			landscape++
		}
		for _, b := range im.Labels {
			if b.X-b.W/2 < -1e-9 || b.X+b.W/2 > 1+1e-9 || b.Y-b.H/2 < -1e-9 || b.Y+b.H/2 > 1+1e-9 {
				t.Fatalf("%s: box %+v leaves the image", im.Path, b)
			}
		}
	}
	n := float64(len(s.Train))
	// The shares train_data.py draws with: 1% none, 6% dense plus the
	// geometric's own tail above 25 (0.93·(5/6)^24 ≈ 1.2%), the mean
	// 0.93·6 + 0.06·57.5 = 9.03; and trainvalno5k.shapes' 25,158 of
	// 117,264 images of 640×480.
	for _, c := range []struct {
		what      string
		got, want float64
	}{{"no boxes", float64(none) / n, 0.01}, {"25 to 90 boxes", float64(dense) / n, 0.072}, {"640x480", float64(landscape) / n, 25158.0 / 117264}, {"mean boxes", float64(boxes) / n / 100, 0.0903}} {
		if c.got < c.want*0.95 || c.got > c.want*1.05 {
			t.Errorf("%s: %.4f, want about %.4f", c.what, c.got, c.want)
		}
	}
	// The validation split is 5k.shapes' sizes, each as often as there:
	// 1,062 of 640×480, 3,587 landscape, 1,243 portrait, 170 square.
	sizes := map[[2]int64]int{}
	var land, port, square int
	for _, im := range s.Val {
		sizes[[2]int64{im.W, im.H}]++
		switch {
		case im.H < im.W:
			land++
		case im.H > im.W:
			port++
		default:
			square++
		}
	}
	if got := sizes[[2]int64{640, 480}]; got != 1062 || len(sizes) != 601 || land != 3587 || port != 1243 || square != 170 {
		t.Errorf("validation sizes: %d of 640x480, %d distinct, %d/%d/%d landscape/portrait/square; want 1062, 601, 3587/1243/170",
			got, len(sizes), land, port, square)
	}
	// At train_dual.py's validation batch 32 they make 157 batches of 19
	// shapes (docs/limitations.md).
	batches, err := Batches(s.Val, 32, 640, Stride)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[[2]int64]bool{}
	for _, b := range batches {
		shapes[[2]int64{b.H, b.W}] = true
	}
	if len(batches) != 157 || len(shapes) != 19 {
		t.Errorf("validation at batch 32: %d batches of %d shapes, want 157 of 19", len(batches), len(shapes))
	}
}

// TestCOCOLikeWorkedExample checks the figures of coco.go's worked
// example: seed 1 as onnxmem's run plans draw (sim.PlanRand), batch 16.
func TestCOCOLikeWorkedExample(t *testing.T) {
	s := COCOLike()
	var boxes int64
	for _, im := range s.Train {
		boxes += im.Boxes
	}
	counts := s.EpochCounts(640, ScratchHigh, rand.New(rand.NewPCG(1, 0x6f6e6e786d656d)))
	var sum int64
	for _, c := range counts {
		sum += c
	}
	groups := Group(counts, 16)
	maxima := make([]int64, len(groups))
	for i, g := range groups {
		maxima[i] = slices.Max(g)
	}
	slices.Sort(maxima)
	got := fmt.Sprintf("%.1f boxes, %d iterations, %.1f after mosaic, densest %d median, %d p99, %d max",
		float64(boxes)/float64(len(s.Train)), len(groups), float64(sum)/float64(len(counts)),
		maxima[len(maxima)/2], maxima[len(maxima)*99/100], maxima[len(maxima)-1])
	const want = "9.0 boxes, 7393 iterations, 20.7 after mosaic, densest 76 median, 165 p99, 236 max"
	if got != want {
		t.Errorf("worked example: %s, want %s", got, want)
	}
}

// TestGroup checks that Epoch is EpochCounts grouped by the batch, the
// last group short.
func TestGroup(t *testing.T) {
	labels := [][]Box{{{0.5, 0.5, 0.2, 0.2}}, {}, {{0.3, 0.3, 0.1, 0.1}, {0.7, 0.7, 0.2, 0.3}}, {{0.5, 0.5, 0.5, 0.5}}, {}}
	sizes := [][2]int64{{640, 480}, {480, 640}, {640, 640}, {500, 375}, {640, 427}}
	flat := EpochCounts(labels, sizes, 640, ScratchHigh, rand.New(rand.NewPCG(3, 4)))
	grouped := Epoch(labels, sizes, 2, 640, ScratchHigh, rand.New(rand.NewPCG(3, 4)))
	if len(grouped) != 3 || len(grouped[2]) != 1 || !slices.Equal(slices.Concat(grouped...), flat) {
		t.Errorf("Epoch at batch 2 = %v, want %v in groups of 2", grouped, flat)
	}
}
