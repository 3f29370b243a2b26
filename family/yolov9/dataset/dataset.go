// Package dataset reads a YOLO dataset as YOLOv9's dataloader
// (utils/dataloaders.py of github.com/WongKinYiu/yolov9 at 5b1ea9a) finds
// it: the data yaml that train_dual.py takes with --data, each split's
// image files, each image's size (from its header) and its label file's
// box count; and it makes the validation's rectangular batches as
// LoadImagesAndLabels(rect=True, pad=0.5) does.
//
// Worked example: 128 validation images at batch 32 (train_dual.py
// validates at twice the training batch 16), image size 640, stride 32.
// The dataloader sorts the images by aspect ratio h/w; a batch whose
// ratios are all below 1 (landscape) gets the shape of its largest,
// [maxi, 1] × 640 / 32 + 0.5, rounded up and times 32: 0.75 (640×480)
// gives ceil(15.5)·32 = 512 high and ceil(20.5)·32 = 672 wide; a batch
// of portraits the inverse; a batch with both, or a square, 672×672.
// These shapes, and so the eval steps' workspaces and block sizes, follow
// from the images' sizes alone, exactly. Which image falls in which batch
// among images of one aspect ratio depends on numpy's argsort, which
// orders ties as its sort kernel does: Batches orders them as numpy's
// x86-simd-sort kernel does on an AVX-512 CPU (SIMDArgsort), the GPU
// servers' kind; on a CPU without AVX-512 (its AVX2 networks, or numpy's
// own introsort elsewhere) a batch's box counts are those of images of its
// aspect ratio, not necessarily of the same images.
package dataset

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/onnxmem/onnxmem/internal/regular"
	"image"
	_ "image/jpeg" // the decoders whose headers give an image's size
	_ "image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Stride is train_dual.py's gs, max(int(model.stride.max()), 32): 32 for
// every YOLOv9 model. check_img_size rounds the image size up to a
// multiple of it (make_divisible), and the validation's rectangular
// batches are shaped in multiples of it.
const Stride = 32

// Image is one image of a split: its file, its width and height in pixels,
// the number of boxes its label file holds and the boxes themselves.
type Image struct {
	Path   string
	W, H   int64
	Boxes  int64
	Labels []Box
}

// Batch is one rectangular validation batch: its images' box counts, in
// order, and the shape every image of it is letterboxed to.
type Batch struct {
	H, W  int64
	Boxes []int64
}

// Batches returns the validation batches of images, batch at a time, as
// LoadImagesAndLabels(rect=True, pad=0.5) makes them at image size imgsz
// and stride: the images sorted by aspect ratio h/w as numpy's argsort
// orders them on an AVX-512 CPU (SIMDArgsort: images of one ratio in the
// order its sorting networks leave them), each batch shaped by its extreme
// ratios.
func Batches(images []Image, batch, imgsz, stride int64) ([]Batch, error) {
	if batch < 1 || imgsz < 1 || stride < 1 {
		return nil, fmt.Errorf("dataset: batch %d, image size %d, stride %d: want each at least 1", batch, imgsz, stride)
	}
	for _, im := range images {
		if im.W < 1 || im.H < 1 {
			return nil, fmt.Errorf("dataset: %s is %dx%d: an image has at least one pixel", im.Path, im.W, im.H)
		}
	}
	ratio := func(im Image) float64 { return float64(im.H) / float64(im.W) }
	ar := make([]float64, len(images))
	for i, im := range images {
		ar[i] = ratio(im)
	}
	sorted := make([]Image, len(images))
	for i, j := range SIMDArgsort(ar) {
		sorted[i] = images[j]
	}
	var out []Batch
	for start := int64(0); start < int64(len(sorted)); start += batch {
		part := sorted[start:min(start+batch, int64(len(sorted)))]
		mini, maxi := ratio(part[0]), ratio(part[len(part)-1])
		h, w := 1.0, 1.0
		switch {
		case maxi < 1:
			h = maxi
		case mini > 1:
			w = 1 / mini
		}
		side := func(s float64) int64 {
			return int64(math.Ceil(s*float64(imgsz)/float64(stride)+0.5)) * stride
		}
		b := Batch{H: side(h), W: side(w)}
		for _, im := range part {
			b.Boxes = append(b.Boxes, im.Boxes)
		}
		out = append(out, b)
	}
	return out, nil
}

// Set is a dataset as a training run reads it: its data yaml and the
// images of its training and validation splits, each split's images sorted
// by path (the dataloader sorts the files of all of a split's folders and
// lists together).
type Set struct {
	Data       *Data
	Train, Val []Image
}

// Load reads the data yaml file and every image and label file of its
// training and validation splits.
func Load(file string) (*Set, error) {
	d, err := ReadData(file)
	if err != nil {
		return nil, err
	}
	s := &Set{Data: d}
	for _, split := range []struct {
		paths []string
		to    *[]Image
	}{{d.Train, &s.Train}, {d.Val, &s.Val}} {
		for _, p := range split.paths {
			ims, err := Images(p)
			if err != nil {
				return nil, err
			}
			*split.to = append(*split.to, ims...)
		}
		slices.SortStableFunc(*split.to, func(a, b Image) int { return strings.Compare(a.Path, b.Path) })
	}
	return s, nil
}

// Epoch returns the box counts of every image of every batch of an epoch
// of the training split at batch size batch and image size imgsz, as
// Epoch draws them.
func (s *Set) Epoch(batch int, imgsz int64, hyp Hyp, rng *rand.Rand) [][]int64 {
	return Group(s.EpochCounts(imgsz, hyp, rng), batch)
}

// EpochCounts returns the box counts of every image of an epoch of the
// training split at image size imgsz, in the epoch's shuffled order, as
// EpochCounts draws them.
func (s *Set) EpochCounts(imgsz int64, hyp Hyp, rng *rand.Rand) []int64 {
	labels, sizes := make([][]Box, len(s.Train)), make([][2]int64, len(s.Train))
	for i, im := range s.Train {
		labels[i], sizes[i] = im.Labels, [2]int64{im.W, im.H}
	}
	return EpochCounts(labels, sizes, imgsz, hyp, rng)
}

// formats are the image files the dataloader takes (utils/dataloaders.py's
// IMG_FORMATS) whose headers this package reads: JPEG and PNG. A split
// with another format is an error, not a file left out.
var formats = map[string]bool{"jpg": true, "jpeg": true, "png": true}

// otherFormats are IMG_FORMATS that the dataloader reads and this package
// does not.
var otherFormats = map[string]bool{"bmp": true, "dng": true, "mpo": true, "tif": true, "tiff": true, "webp": true, "pfm": true}

// Images returns the images of a split: a folder, searched recursively as
// glob('**/*.*') does, or a text file that lists them (one path a line,
// "./" relative to the file's folder), sorted by path as the dataloader
// sorts them; each with its size from its header and the box count of its
// label file (the path with its last "/images/" made "/labels/" and its
// extension ".txt"; a missing label file is an image without boxes).
// A JPEG whose EXIF orientation is 6 or 8 (a photo stored rotated) has its
// width and height swapped, as exif_size swaps them; a PNG's eXIf chunk is
// not read (PIL's _getexif, which exif_size calls, is JPEG's).
func Images(split string) ([]Image, error) {
	paths, err := listImages(split)
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(paths))
	for _, p := range paths {
		im, err := readImage(p)
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}

// listImages returns the image files of a split, sorted.
func listImages(split string) ([]string, error) {
	st, err := os.Stat(split)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	var paths []string
	add := func(p string) error {
		ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(p), "."))
		switch {
		case formats[ext]:
			paths = append(paths, p)
		case otherFormats[ext]:
			return fmt.Errorf("dataset: %s: onnxmem reads the sizes of JPEG and PNG images only; convert it, or leave it out of the split", p)
		}
		return nil
	}
	if st.IsDir() {
		err = filepath.WalkDir(split, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			return add(p)
		})
	} else {
		var f *os.File
		if f, err = regular.Open(split); err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() && err == nil {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			if rest, ok := strings.CutPrefix(line, "./"); ok {
				line = filepath.Join(filepath.Dir(split), rest)
			}
			err = add(line)
		}
		if err == nil {
			err = sc.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("dataset: %s holds no JPEG or PNG images", split)
	}
	slices.Sort(paths)
	return paths, nil
}

// readImage reads an image's size from its header and its label file's
// box count.
func readImage(p string) (Image, error) {
	f, err := regular.Open(p)
	if err != nil {
		return Image{}, fmt.Errorf("dataset: %w", err)
	}
	cfg, format, err := image.DecodeConfig(f)
	if err == nil && format == "jpeg" {
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			if o := jpegOrientation(bufio.NewReader(f)); o == 6 || o == 8 {
				cfg.Width, cfg.Height = cfg.Height, cfg.Width
			}
		}
	}
	f.Close()
	if err != nil {
		return Image{}, fmt.Errorf("dataset: %s: %v", p, err)
	}
	labels, err := labelBoxes(labelPath(p))
	if err != nil {
		return Image{}, err
	}
	return Image{Path: p, W: int64(cfg.Width), H: int64(cfg.Height), Boxes: int64(len(labels)), Labels: labels}, nil
}

// jpegOrientation returns the EXIF orientation (tag 0x0112 of IFD0 in the
// APP1 "Exif" segment) of the JPEG read from r, or 0 when it has none or
// the segments before the image data hold no readable one.
//
// Worked example: FF D8 (SOI), FF E1 and a length, "Exif\0\0", then a TIFF
// header "MM\0*" with IFD0 at offset 8, whose entry 01 12 00 03 00 00 00
// 01 00 06 00 00 is the orientation, a SHORT of value 6: rotated 90°
// clockwise, so the dataloader swaps the width and height.
func jpegOrientation(r *bufio.Reader) int {
	var soi [2]byte
	if _, err := io.ReadFull(r, soi[:]); err != nil || soi != [2]byte{0xFF, 0xD8} {
		return 0
	}
	for {
		var m [4]byte
		if _, err := io.ReadFull(r, m[:2]); err != nil || m[0] != 0xFF {
			return 0
		}
		for m[1] == 0xFF { // fill bytes
			b, err := r.ReadByte()
			if err != nil {
				return 0
			}
			m[1] = b
		}
		if m[1] == 0xDA || m[1] == 0xD9 { // the image data, or its end
			return 0
		}
		if _, err := io.ReadFull(r, m[2:]); err != nil {
			return 0
		}
		n := int(m[2])<<8 | int(m[3]) - 2
		if n < 0 {
			return 0
		}
		if m[1] != 0xE1 {
			if _, err := r.Discard(n); err != nil {
				return 0
			}
			continue
		}
		seg := make([]byte, n)
		if _, err := io.ReadFull(r, seg); err != nil {
			return 0
		}
		if o, ok := exifOrientation(seg); ok {
			return o
		}
	}
}

// exifOrientation reads the orientation from an APP1 segment's payload:
// "Exif\0\0" and a TIFF structure.
func exifOrientation(seg []byte) (int, bool) {
	tiff, ok := bytes.CutPrefix(seg, []byte("Exif\x00\x00"))
	if !ok || len(tiff) < 8 {
		return 0, false
	}
	var order binary.ByteOrder
	switch string(tiff[:2]) {
	case "II":
		order = binary.LittleEndian
	case "MM":
		order = binary.BigEndian
	default:
		return 0, false
	}
	ifd := int64(order.Uint32(tiff[4:8]))
	if ifd+2 > int64(len(tiff)) {
		return 0, false
	}
	count := int64(order.Uint16(tiff[ifd:]))
	for i := range count {
		e := ifd + 2 + 12*i
		if e+12 > int64(len(tiff)) {
			return 0, false
		}
		if order.Uint16(tiff[e:]) == 0x0112 && order.Uint16(tiff[e+2:]) == 3 { // SHORT
			return int(order.Uint16(tiff[e+8:])), true
		}
	}
	return 0, true
}

// labelPath is img2label_paths: the last "/images/" of p made "/labels/",
// the extension ".txt".
func labelPath(p string) string {
	sep := string(filepath.Separator)
	sa, sb := sep+"images"+sep, sep+"labels"+sep
	if i := strings.LastIndex(p, sa); i >= 0 {
		p = p[:i] + sb + p[i+len(sa):]
	}
	return strings.TrimSuffix(p, filepath.Ext(p)) + ".txt"
}

// labelBoxes returns the boxes of a label file; a missing file has none.
func labelBoxes(p string) ([]Box, error) {
	data, err := regular.ReadFile(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return ReadLabels(bytes.NewReader(data), p)
}

// ReadLabels reads the boxes of a YOLO label file from r (named name in
// errors), as verify_image_label reads them: one a line, a class and a
// box (x y w h, normalized), or a class and a segment's polygon (x1 y1 x2
// y2 ...), whose box is the polygon's extent (segments2boxes); a line that
// repeats another box is dropped (np.unique).
func ReadLabels(r io.Reader, name string) ([]Box, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []Box
	line := 0
	seen := map[[5]float64]bool{}
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 5 {
			return nil, fmt.Errorf("dataset: %s line %d: %d fields: want a class and a box (x y w h), or a polygon", name, line, len(fields))
		}
		v := make([]float64, len(fields))
		for i, f := range fields {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("dataset: %s line %d: %q is not a number", name, line, f)
			}
			v[i] = x
		}
		row := [5]float64{v[0], v[1], v[2], v[3], v[4]}
		if len(v) > 6 { // a polygon: its extent
			xs, ys := []float64{}, []float64{}
			for i := 1; i+1 < len(v); i += 2 {
				xs, ys = append(xs, v[i]), append(ys, v[i+1])
			}
			x1, x2, y1, y2 := slices.Min(xs), slices.Max(xs), slices.Min(ys), slices.Max(ys)
			row = [5]float64{v[0], (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1}
		}
		if !seen[row] {
			seen[row] = true
			out = append(out, Box{X: row[1], Y: row[2], W: row[3], H: row[4]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", name, err)
	}
	return out, nil
}
