package main

import (
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeDataset writes a small YOLO dataset under dir: train images of
// mixed aspect ratios with label files of 0 to 9 boxes, val images of three
// shapes, and data.yaml with three classes; it returns the yaml's path.
func writeDataset(t *testing.T, dir string, train, val [][2]int) string {
	t.Helper()
	write := func(split string, i int, size [2]int) {
		img := filepath.Join(dir, "images", split, fmt.Sprintf("%03d.png", i))
		lbl := filepath.Join(dir, "labels", split, fmt.Sprintf("%03d.txt", i))
		for _, p := range []string{img, lbl} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, image.NewGray(image.Rect(0, 0, size[0], size[1]))); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var b strings.Builder
		for k := range i % 10 {
			fmt.Fprintf(&b, "%d %.3f %.3f 0.2 0.15\n", k%3, 0.1+0.08*float64(k), 0.5)
		}
		if err := os.WriteFile(lbl, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range train {
		write("train", i, s)
	}
	for i, s := range val {
		write("val", i, s)
	}
	yaml := filepath.Join(dir, "data.yaml")
	text := "path: " + dir + "\ntrain: images/train\nval: images/val\nnames: [cat, dog, bird]\n"
	if err := os.WriteFile(yaml, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return yaml
}

// TestRunData runs a training run on a dataset: an epoch is every training
// image once (ten images at batch 2: five iterations), validation the val
// images' rectangular batches at twice the batch in the dataloader's
// shapes (landscape 4:3 images at 640: 512x672; portraits 672x512), the
// head gets the dataset's three classes, and the flags that the dataset
// replaces are refused.
func TestRunData(t *testing.T) {
	var train [][2]int
	for i := range 10 {
		train = append(train, [2]int{40 + 4*i, 30 + 3*(i%4)})
	}
	val := [][2]int{{40, 30}, {40, 30}, {40, 30}, {40, 30}, {30, 40}, {30, 40}}
	yaml := writeDataset(t, t.TempDir(), train, val)
	code, stdout, stderr := runCmd(t, "", "run", "-data", yaml, "-batch", "2", "-epochs", "1", "-csv", "yolov9-t")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var kinds, vals []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
		f := strings.Split(line, ",")
		kinds = append(kinds, f[1])
		if f[1] == "val" {
			vals = append(vals, f[2]+"x"+f[3]+"x"+f[4])
		}
	}
	if got, want := strings.Join(kinds, " "), "setup train train train train train val val ckpt"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if got, want := strings.Join(vals, " "), "4x512x672 2x672x512"; got != want {
		t.Errorf("validation batches %q, want %q", got, want)
	}
	code, stdout, stderr = runCmd(t, "", "run", "-data", yaml, "-batch", "2", "-epochs", "1", "-iters", "2", "yolov9-t")
	if code != 0 || !strings.Contains(stdout, "yolov9-t nc=3") || strings.Count(stdout, " train ") != 2 || !strings.Contains(stdout, "GPU_mem after the 2 iterations: median") {
		t.Errorf("-iters 2 with -data: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	for _, args := range [][]string{{"-mean-boxes", "3"}, {"-val-images", "8"}, {"-nc", "80"}} {
		code, _, stderr := runCmd(t, "", append(append([]string{"run", "-data", yaml}, args...), "yolov9-t")...)
		if code == 0 || !strings.Contains(stderr, "-data") {
			t.Errorf("%v with -data: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestMaxBatchData checks that maxbatch -data and run -data give one
// answer: the run at the largest batch maxbatch finds completes under the
// same limit, and at one more it runs out of memory.
func TestMaxBatchData(t *testing.T) {
	var train [][2]int
	for i := range 24 {
		train = append(train, [2]int{40 + 4*i, 30 + 3*(i%4)})
	}
	yaml := writeDataset(t, t.TempDir(), train, [][2]int{{40, 30}, {30, 40}, {40, 40}})
	code, stdout, stderr := runCmd(t, "", "maxbatch", "-data", yaml, "-device", "3G", "-json", "yolov9-t")
	if code != 0 {
		t.Fatalf("maxbatch -data: exit %d: %s", code, stderr)
	}
	var got struct {
		MaxBatch int64 `json:"max_batch"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.MaxBatch < 1 {
		t.Fatalf("maxbatch -data: %v, %s", err, stdout)
	}
	for _, b := range []int64{got.MaxBatch, got.MaxBatch + 1} {
		code, stdout, stderr := runCmd(t, "", "run", "-data", yaml, "-batch", fmt.Sprint(b), "-amp", "-device", "3G", "yolov9-t")
		fits := strings.Contains(stdout, ": fits")
		if code != 0 || fits != (b == got.MaxBatch) {
			t.Errorf("run -data at batch %d (max batch %d): exit %d, fits %v; stdout %s stderr %s", b, got.MaxBatch, code, fits, stdout, stderr)
		}
	}
	t.Logf("max batch %d in 3 GB", got.MaxBatch)
}
