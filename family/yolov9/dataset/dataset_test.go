package dataset

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/measured"
)

// TestBatchesMeasured checks the rectangular validation batches against
// the official dataloader's, as calibration/train_data.py recorded them on
// the device: the validation images of each dataset (dataset.json: each
// image's size and box count) batched at twice each run's training batch
// give the shapes that val_dual.run ran and each image's box count, batch
// for batch, exactly: the images of one aspect ratio fall in the order of
// numpy's argsort on the device's AVX-512 CPU (SIMDArgsort).
func TestBatchesMeasured(t *testing.T) {
	checked := 0
	for _, c := range []struct {
		dir  string
		runs []string
	}{
		{"train_data", []string{"run_yolov9-s_b16.json", "run_gelan-c_b8.json", "run_yolov9-c_b16.json"}},
		{"train_data_long", []string{"run_yolov9-s_b16.json"}},
		{"train_data_v2", []string{"run_yolov9-t_b24.json", "run_yolov9-m_b12_w3.json", "run_gelan-s_b5.json", "run_yolov9-t_b16.json"}},
	} {
		b, err := measured.Read(c.dir + "/dataset.json")
		if err != nil {
			t.Fatal(err)
		}
		var ds struct {
			Val []struct {
				File  string
				W, H  int64
				Boxes int64
			}
		}
		if err := json.Unmarshal(b, &ds); err != nil {
			t.Fatal(err)
		}
		var images []Image
		for _, im := range ds.Val {
			images = append(images, Image{Path: im.File, W: im.W, H: im.H, Boxes: im.Boxes})
		}
		slices.SortFunc(images, func(a, b Image) int { return strings.Compare(a.Path, b.Path) })
		for _, run := range c.runs {
			b, err := measured.Read(c.dir + "/" + run)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Batch  int64
				Events []struct {
					Kind  string
					Shape []int64
					Boxes []int64
				}
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			var got []Batch
			for _, e := range r.Events {
				if e.Kind == "val" {
					got = append(got, Batch{H: e.Shape[2], W: e.Shape[3], Boxes: e.Boxes})
				}
			}
			want, err := Batches(images, 2*r.Batch, 640, 32)
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range got {
				w := want[i%len(want)] // each validation of the run goes through the same batches
				if g.H != w.H || g.W != w.W || !slices.Equal(g.Boxes, w.Boxes) {
					t.Errorf("%s/%s: validation batch %d is %dx%d with box counts %v; Batches gives %dx%d with %v", c.dir, run, i, g.H, g.W, g.Boxes, w.H, w.W, w.Boxes)
				}
				checked++
			}
			t.Logf("%s/%s: %d validation batches", c.dir, run, len(got))
		}
	}
	if checked < 60 {
		t.Errorf("%d validation batches checked: the measurements lost them", checked)
	}
}

// TestBatches checks the shapes on small cases: a landscape batch takes
// its largest ratio, a portrait batch its smallest, a mixed one a square,
// and the last batch is short.
func TestBatches(t *testing.T) {
	im := func(w, h, boxes int64) Image {
		return Image{Path: fmt.Sprintf("%dx%d", w, h), W: w, H: h, Boxes: boxes}
	}
	got, err := Batches([]Image{im(480, 640, 1), im(640, 480, 2), im(640, 427, 3), im(640, 640, 4), im(500, 375, 5)}, 2, 640, 32)
	if err != nil {
		t.Fatal(err)
	}
	want := []Batch{{H: 448, W: 672, Boxes: []int64{3, 2}}, {H: 512, W: 672, Boxes: []int64{5, 4}}, {H: 672, W: 512, Boxes: []int64{1}}}
	// ratios sorted: 427/640=0.667, 480/640=0.75, 375/500=0.75, 1, 640/480=1.33
	want = []Batch{{H: 512, W: 672, Boxes: []int64{3, 2}}, {H: 672, W: 672, Boxes: []int64{5, 4}}, {H: 672, W: 512, Boxes: []int64{1}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Batches (-want +got):\n%s", d)
	}
	for _, bad := range [][3]int64{{0, 640, 32}, {2, 0, 32}, {2, 640, 0}} {
		if _, err := Batches(nil, bad[0], bad[1], bad[2]); err == nil || !strings.HasPrefix(err.Error(), "dataset: ") {
			t.Errorf("Batches(%v): %v, want an error", bad, err)
		}
	}
	if _, err := Batches([]Image{im(0, 10, 0)}, 2, 640, 32); err == nil {
		t.Error("an image of no pixels: no error")
	}
}

// TestImages writes a small dataset (a JPEG and a PNG under images/, their
// label files under labels/, one without) and reads it back: sizes from the
// headers, box counts from the labels, duplicates dropped, a missing label
// file an image without boxes, and a format whose header is not read an
// error that names the file.
func TestImages(t *testing.T) {
	root := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	encode := func(rel string, w, h int, png bool) {
		var buf strings.Builder
		img := image.NewGray(image.Rect(0, 0, w, h))
		f, err := os.Create(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if png {
			err = pngEncode(f, img)
		} else {
			err = jpeg.Encode(f, img, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		_ = buf
	}
	write("images/val/a.jpg", nil)
	encode("images/val/a.jpg", 64, 48, false)
	write("images/val/b.png", nil)
	encode("images/val/b.png", 30, 40, true)
	write("labels/val/a.txt", []byte("0 0.5 0.5 0.1 0.1\n3 0.2 0.2 0.1 0.1\n\n0 0.50 0.5 0.1 0.1\n"))
	got, err := Images(filepath.Join(root, "images", "val"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Image{{Path: filepath.Join(root, "images/val/a.jpg"), W: 64, H: 48, Boxes: 2, Labels: []Box{{0.5, 0.5, 0.1, 0.1}, {0.2, 0.2, 0.1, 0.1}}},
		{Path: filepath.Join(root, "images/val/b.png"), W: 30, H: 40, Boxes: 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Images (-want +got):\n%s", d)
	}
	// A list file of the same images, relative to its folder.
	write("val.txt", []byte("./images/val/b.png\n./images/val/a.jpg\n"))
	if got, err := Images(filepath.Join(root, "val.txt")); err != nil || len(got) != 2 || got[0].W != 64 {
		t.Errorf("Images(val.txt) = %+v, %v", got, err)
	}
	write("images/val/c.webp", []byte("RIFF"))
	if _, err := Images(filepath.Join(root, "images", "val")); err == nil || !strings.Contains(err.Error(), "c.webp: onnxmem reads the sizes of JPEG and PNG images only") {
		t.Errorf("a WebP image: %v", err)
	}
	if got, err := ReadLabels(strings.NewReader("2 0.1 0.2 0.5 0.2 0.3 0.6\n"), "x.txt"); err != nil || len(got) != 1 || math.Abs(got[0].W-0.4) > 1e-12 || math.Abs(got[0].Y-0.4) > 1e-12 {
		t.Errorf("a polygon's box: %+v, %v", got, err)
	}
	if _, err := ReadLabels(strings.NewReader("0 0.5 0.5\n"), "x.txt"); err == nil || !strings.Contains(err.Error(), "x.txt line 1: 3 fields") {
		t.Errorf("a short label line: %v", err)
	}
}

// pngEncode writes img as a PNG.
func pngEncode(f *os.File, img image.Image) error { return png.Encode(f, img) }

// TestParseData reads data yamls as people write them: COCO's (an indexed
// names block, a download script), a flow list of names with nc, and the
// errors of what train_dual.py cannot train on.
func TestParseData(t *testing.T) {
	coco := `# COCO 2017 dataset
path: ../datasets/coco  # dataset root dir
train: train2017.txt  # train images
val: val2017.txt
test: test-dev2017.txt

# Classes
names:
  0: person
  1: bicycle
  2: 'car'

download: |
  from utils.general import download, Path
  dir = Path(yaml['path'])  # dataset root dir
`
	d, err := ParseData([]byte(coco), "coco.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Data{Root: "../datasets/coco", Train: []string{"train2017.txt"}, Val: []string{"val2017.txt"}, NC: 3, Names: []string{"person", "bicycle", "car"}}); !cmp.Equal(want, d) {
		t.Errorf("coco.yaml: %s", cmp.Diff(want, d))
	}
	d, err = ParseData([]byte("train: [a/images, b/images]\nval: c/images\nnc: 2\nnames: ['x', \"y # not a comment\"]\n"), "flow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Data{Train: []string{"a/images", "b/images"}, Val: []string{"c/images"}, NC: 2, Names: []string{"x", "y # not a comment"}}); !cmp.Equal(want, d) {
		t.Errorf("flow.yaml: %s", cmp.Diff(want, d))
	}
	for _, tc := range []struct{ text, want string }{
		{"train: a\nval: b\nnc: 3\nnames: [x, y]\n", "nc 3 with 2 names"},
		{"train: a\nval: b\nnames: [x]\nepochs: 3\n", `unknown key "epochs"`},
		{"train: a\nnames: [x]\n", "want train and val"},
		{"train: a\nval: b\n", "want names (or nc)"},
		{"train: a\nval: b\nnames:\n  1: x\n", `want "- item", or "N: name" with N counting from 0`},
		{"  train: a\n", "an indented line outside a key's block"},
		{"train a\n", `want "key: value"`},
		{"train: a\nval: b\nnc: -1\n", "want a class count"},
		{"train: a\nval: b\nnames: [x\n", "a flow list must end on its line"},
	} {
		if _, err := ParseData([]byte(tc.text), "d.yaml"); err == nil || !strings.HasPrefix(err.Error(), "dataset: d.yaml") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.text, err, tc.want)
		}
	}
}

// FuzzParseData feeds the data yaml parser arbitrary text: an error that
// names the file, or a Data with both splits and as many names as classes
// where it gives names.
func FuzzParseData(f *testing.F) {
	for _, s := range []string{"train: a\nval: b\nnames: [x, y]\n", "path: r\ntrain: a\nval: b\nnames:\n  0: x\n  1: y\ndownload: |\n  x\n", "train: a\nval: b\nnc: 4\n", "names:\n- a\n- b\ntrain: t\nval: v\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseData([]byte(s), "f.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dataset: f.yaml") {
				t.Fatalf("%q: error %q does not name the file", s, err)
			}
			return
		}
		if len(d.Train) == 0 || len(d.Val) == 0 || d.NC < 1 || (len(d.Names) > 0 && int64(len(d.Names)) != d.NC) {
			t.Fatalf("%q: %+v", s, d)
		}
	})
}

// FuzzReadLabels feeds the label reader arbitrary text: an error that
// names the file, or no more boxes than lines.
func FuzzReadLabels(f *testing.F) {
	for _, s := range []string{"0 0.5 0.5 0.1 0.1\n", "1 0.1 0.1 0.2 0.2 0.3 0.3\n\n", "x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		boxes, err := ReadLabels(strings.NewReader(s), "l.txt")
		n := int64(len(boxes))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dataset: l.txt") {
				t.Fatalf("%q: error %q", s, err)
			}
			return
		}
		if n < 0 || n > int64(strings.Count(s, "\n")+1) {
			t.Fatalf("%q: %d boxes", s, n)
		}
	})
}

// TestMosaicMeasured draws training images as train_dual.py's dataloader
// makes them from calibration/train_data.py's dataset and compares their
// box counts with the ones the official dataloader made on the device
// (recorded after each iteration): the mean boxes of an image after
// mosaic, perspective and mixup, and the median over the iterations of
// the densest image of a batch, what the loss pads to. The dataset's
// images are its own (dataset.json: sizes and label lines); the draws
// (which images, centers, scales, mixup) are onnxmem's generator's, not
// the run's Python and numpy streams, so the comparison is of two samples
// of one distribution: within 10% for the mean and 15% for the median of
// the batch maxima.
func TestMosaicMeasured(t *testing.T) {
	b, err := measured.Read("train_data/dataset.json")
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Train []struct {
			W, H   int64
			Labels []string
		}
	}
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(33, 1))
	var labels [][]Box
	var sizes [][2]int64
	for i, im := range ds.Train {
		boxes, err := ReadLabels(strings.NewReader(strings.Join(im.Labels, "\n")), fmt.Sprintf("train image %d", i))
		if err != nil {
			t.Fatal(err)
		}
		labels, sizes = append(labels, boxes), append(sizes, [2]int64{im.W, im.H})
	}
	for _, run := range []struct {
		file  string
		batch int
	}{{"run_yolov9-s_b16.json", 16}, {"run_gelan-c_b8.json", 8}} {
		b, err := measured.Read("train_data/" + run.file)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Events []struct {
				Kind  string
				Boxes []int64
			}
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		var perImage, maxima []float64
		for _, e := range r.Events {
			if e.Kind == "train" {
				for _, n := range e.Boxes {
					perImage = append(perImage, float64(n))
				}
				maxima = append(maxima, float64(slices.Max(e.Boxes)))
			}
		}
		var drawn, drawnMax []float64
		for range 20 { // epochs
			for _, m := range EpochMaxima(labels, sizes, run.batch, 640, ScratchHigh, rng) {
				drawnMax = append(drawnMax, float64(m))
			}
			for i := range labels {
				drawn = append(drawn, float64(Mosaic(labels, sizes, i, 640, ScratchHigh, rng)))
			}
		}
		mean := func(x []float64) float64 {
			s := 0.0
			for _, v := range x {
				s += v
			}
			return s / float64(len(x))
		}
		median := func(x []float64) float64 { y := slices.Clone(x); slices.Sort(y); return y[len(y)/2] }
		rel := func(a, b float64) float64 { return 100 * (a - b) / b }
		t.Logf("%s: boxes an image %.1f drawn, %.1f measured (%+.0f%%); the densest image of a batch, median %.0f drawn, %.0f measured (%+.0f%%); most %.0f drawn over 20 epochs, %.0f measured over 2",
			run.file, mean(drawn), mean(perImage), rel(mean(drawn), mean(perImage)), median(drawnMax), median(maxima), rel(median(drawnMax), median(maxima)), slices.Max(drawnMax), slices.Max(maxima))
		if e := rel(mean(drawn), mean(perImage)); e > 10 || e < -10 {
			t.Errorf("%s: %.1f boxes an image drawn, %.1f measured: want within 10%%", run.file, mean(drawn), mean(perImage))
		}
		if e := rel(median(drawnMax), median(maxima)); e > 15 || e < -15 {
			t.Errorf("%s: the densest image of a batch has %.0f boxes (median) drawn, %.0f measured: want within 15%%", run.file, median(drawnMax), median(maxima))
		}
	}
}

// exifJPEG returns a w×h JPEG with an APP1 Exif segment whose IFD0 holds
// orientation o, in byte order mm (big-endian) or II.
func exifJPEG(t testing.TB, w, h int, o uint16, mm bool) []byte {
	var img bytes.Buffer
	if err := jpeg.Encode(&img, image.NewGray(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	var order interface {
		binary.ByteOrder
		binary.AppendByteOrder
	} = binary.LittleEndian
	tiff := []byte("II*\x00")
	if mm {
		order, tiff = binary.BigEndian, []byte("MM\x00*")
	}
	tiff = order.AppendUint32(tiff, 8)
	tiff = order.AppendUint16(tiff, 2) // two entries: an unrelated tag, then the orientation
	for _, e := range [][2]uint16{{0x010F, 2}, {0x0112, 3}} {
		tiff = order.AppendUint16(tiff, e[0])
		tiff = order.AppendUint16(tiff, e[1])
		tiff = order.AppendUint32(tiff, 1)
		v := make([]byte, 4)
		if e[0] == 0x0112 {
			order.PutUint16(v, o)
		}
		tiff = append(tiff, v...)
	}
	seg := append([]byte("Exif\x00\x00"), tiff...)
	app1 := []byte{0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	b := img.Bytes()
	return append(append(append([]byte{}, b[:2]...), append(app1, seg...)...), b[2:]...)
}

// TestEXIFOrientation reads JPEGs stored rotated as exif_size does: an
// orientation of 6 or 8 swaps the width and height, others (1, 3) keep
// them, in either byte order; a JPEG without EXIF keeps them too.
func TestEXIFOrientation(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		o    uint16
		mm   bool
		w, h int64
	}{{1, false, 64, 48}, {3, true, 64, 48}, {6, false, 48, 64}, {8, true, 48, 64}}
	for i, c := range cases {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.jpg", i)), exifJPEG(t, 64, 48, c.o, c.mm), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Images(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if got[i].W != c.w || got[i].H != c.h {
			t.Errorf("orientation %d: %dx%d, want %dx%d", c.o, got[i].W, got[i].H, c.w, c.h)
		}
	}
}

// FuzzJPEGOrientation feeds the EXIF reader arbitrary bytes behind a JPEG's
// SOI marker: it must return without panicking, and an orientation of 0 to
// 65535.
func FuzzJPEGOrientation(f *testing.F) {
	f.Add(exifJPEG(f, 8, 8, 6, false)[2:])
	f.Add(exifJPEG(f, 8, 8, 8, true)[2:])
	f.Add([]byte{0xFF, 0xE1, 0x00, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		o := jpegOrientation(bufio.NewReader(bytes.NewReader(append([]byte{0xFF, 0xD8}, b...))))
		if o < 0 || o > 65535 {
			t.Fatalf("orientation %d", o)
		}
	})
}

// BenchmarkLoaderEpochCOCO draws one epoch of the dataloader's stream over
// the built-in COCO-like training split (118,287 images) at batch 16 with
// 8 workers: what a -data run on a COCO-sized dataset pays for each epoch
// of each batch size a search tries.
func BenchmarkLoaderEpochCOCO(b *testing.B) {
	set := COCOLike()
	b.ResetTimer()
	for range b.N {
		set.NewLoader(16, 8, 640, ScratchHigh, false).Epoch()
	}
}
