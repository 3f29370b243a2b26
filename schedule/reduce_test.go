package schedule

import (
	"encoding/json"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
)

// TestColumnSumBuffers checks columnSumBuffers against every shape that
// calibration/reduce_staging.py measured on the H200: the bytes x.sum(0)
// requested beyond its output, staging and semaphores together.
func TestColumnSumBuffers(t *testing.T) {
	b, err := measured.Read("reduce_staging.json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Rows [][4]int64 `json:"rows"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) < 1000 {
		t.Fatalf("%d shapes, want the 1,020 measured", len(res.Rows))
	}
	split := 0
	for _, r := range res.Rows {
		st, sem := columnSumBuffers(r[0], r[1])
		if st+sem != r[3] {
			t.Errorf("%d rows × %d columns (%d-byte elements): %d + %d bytes, measured %d", r[0], r[1], r[2], st, sem, r[3])
		}
		if st > 0 {
			split++
		}
	}
	if split < 500 {
		t.Errorf("only %d shapes split their rows; the test would not see a wrong formula", split)
	}
	for _, tc := range []struct{ rows, cols, staging, sem int64 }{
		{1600, 3072, 39321600, 96}, // vit_b_32's fc1 at batch 32
		{400, 3072, 0, 0},          // at batch 8
		{1, 1000, 0, 0},
		{1 << 20, 1, 0, 0},
	} {
		if st, sem := columnSumBuffers(tc.rows, tc.cols); st != tc.staging || sem != tc.sem {
			t.Errorf("%d × %d: %d, %d; want %d, %d", tc.rows, tc.cols, st, sem, tc.staging, tc.sem)
		}
	}
}

// TestChannelSumBuffers checks a conv bias gradient's reduction buffers
// against the ground truth's model-step traces of yolov9-c at batch 8
// (../shared/groundtruth/traces), where loss = Σ o.sum() hands the head's
// 1×1 convs the expanded seed: on 80×80 and 40×40 each class conv (80
// columns) allocates a staging and 12 bytes of semaphores (3 blocks of
// columns), each box conv (64 columns) one and 8 bytes; on 20×20 neither
// allocates anything. A gradient with contiguous rows splits only when a
// thread of a 512-thread block would sum 256 rows or more.
func TestChannelSumBuffers(t *testing.T) {
	for _, tc := range []struct {
		rows, cols    int64
		expanded      bool
		staging, sems int64
	}{
		{51200, 80, true, 1802240, 12},
		{51200, 64, true, 1638400, 8},
		{12800, 80, true, 512000, 12},
		{12800, 64, true, 409600, 8},
		{3200, 80, true, 0, 0},
		{3200, 64, true, 0, 0},
		{51200, 80, false, 0, 0},         // 100 rows a thread
		{130560, 80, false, 0, 0},        // 255 rows a thread of 512
		{131072, 80, false, 2240, 320},   // 256: max(min(⌈528/80⌉, ⌈256/16⌉), 1) = 7 blocks
		{204800, 80, false, 2240, 320},   // 400 a thread: max(min(⌈528/80⌉, 25), 2) = 7 blocks
		{204800, 512, false, 4096, 2048}, // 2 blocks
		{204800, 1024, false, 0, 0},      // 1024 blocks of columns > 528
	} {
		var st, sem int64
		if tc.expanded {
			st, sem = reduceBuffers(tc.rows, tc.cols, 1)
		} else {
			st, sem = channelSumBuffers(tc.rows, tc.cols)
		}
		if st != tc.staging || sem != tc.sems {
			t.Errorf("%d rows × %d columns, expanded %v: %d + %d bytes, want %d + %d", tc.rows, tc.cols, tc.expanded, st, sem, tc.staging, tc.sems)
		}
	}
}

// TestChannelSumMeasured checks ReductionBytes against every sum that
// calibration/conv_bias_reduce.py measured on the H200: g.sum((0, 2, 3))
// of an [N, C, H, W] gradient, float32 and float16, N 1 to 64, C 16 to
// 1024, H = W 10 to 160, laid out contiguous, as a channel slice, as a
// slice of a longer flattened H·W (the ChannelSum launch) or expanded
// from one element (ExpandedChannelSum): the bytes requested beyond the
// output.
func TestChannelSumMeasured(t *testing.T) {
	b, err := measured.Read("conv_bias_reduce.json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Sums [][6]any `json:"sums"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Sums) < 1800 {
		t.Fatalf("%d sums, want the 1,896 measured", len(res.Sums))
	}
	staged := map[string]int{}
	for _, r := range res.Sums {
		layout := r[0].(string)
		n, c, s, want := int64(r[2].(float64)), int64(r[3].(float64)), int64(r[4].(float64)), int64(r[5].(float64))
		which := ChannelSum
		if layout == "expand" {
			which = ExpandedChannelSum
		}
		got := ReductionBytes(ConvCall{Which: which, N: n * s * s, Cout: c, ElemSize: 4})
		if got != want {
			t.Errorf("%s, %v-byte elements, N %d C %d H=W %d: %d bytes, measured %d", layout, r[1], n, c, s, got, want)
		}
		if want > 0 {
			staged[layout]++
		}
	}
	for _, l := range []string{"contig", "slice", "hwslice", "expand"} {
		if staged[l] < 50 {
			t.Errorf("%s: %d sums staged; too few for the test to see a wrong launch", l, staged[l])
		}
	}
}
