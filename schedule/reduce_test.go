package schedule

import (
	"encoding/json"
	"os"
	"testing"
)

// TestColumnSumBuffers checks columnSumBuffers against every shape that
// calibration/reduce_staging.py measured on the H200: the bytes x.sum(0)
// requested beyond its output, staging and semaphores together.
func TestColumnSumBuffers(t *testing.T) {
	b, err := os.ReadFile("../calibration/results/reduce_staging.json")
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
