package dataset

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCOCOLike checks the built-in dataset: COCO 2017's image counts, the
// same draw on every call, train_data.py's shares of sizes and counts.
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
	// geometric's own tail above 25 (0.93·(5/6)^24 ≈ 1.2%), 34% 640×480;
	// the mean 0.93·6 + 0.06·57.5 = 9.03.
	for _, c := range []struct {
		what      string
		got, want float64
	}{{"no boxes", float64(none) / n, 0.01}, {"25 to 90 boxes", float64(dense) / n, 0.072}, {"640x480", float64(landscape) / n, 0.34}, {"mean boxes", float64(boxes) / n / 100, 0.0903}} {
		if c.got < c.want*0.95 || c.got > c.want*1.05 {
			t.Errorf("%s: %.4f, want about %.4f", c.what, c.got, c.want)
		}
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
