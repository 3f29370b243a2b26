// Package measured reads the measurements that calibration/ recorded on
// the device, for the tests that compare onnxmem's predictions with them.
// It holds no numbers itself.
package measured

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// MaxBatchRun is one max batch that calibration/max_batch.py found: the
// largest batch of a step that ran without torch.OutOfMemoryError in a
// fresh process whose caching allocator was capped by
// set_per_process_memory_fraction, confirmed by two passing runs at it and
// two failing ones at the next batch.
type MaxBatchRun struct {
	// Step is model_step (yolov9_segments.py's harness), eval_step
	// (eval_step.py's validation step) or train_step (train_step.py's
	// step of the official code: SGD, EMA, 16 boxes an image).
	Step     string `json:"step"`
	Cfg      string `json:"cfg"`
	Img      int64  `json:"img"`
	AMP      bool   `json:"amp"`
	Segments int    `json:"segments"`
	Capacity int64  `json:"capacity_bytes"`
	Measured struct {
		MaxBatch     int64 `json:"max_batch"`
		FailsAt      int64 `json:"fails_at"`
		Peak         int64 `json:"peak"`
		PeakReserved int64 `json:"peak_reserved"`
	} `json:"measured"`
	// Trials are the processes the search ran: capped (Capacity set) or,
	// at the max batch, uncapped (Mode "uncapped").
	Trials []struct {
		Batch         int64            `json:"batch"`
		Mode          string           `json:"mode"`
		Status        string           `json:"status"`
		Capacity      *int64           `json:"capacity_bytes"`
		ReservedAtEnd int64            `json:"reserved_at_end"`
		Retries       int64            `json:"num_alloc_retries"`
		Result        map[string]int64 `json:"result"`
	} `json:"trial_details"`
}

// MaxBatchRuns reads a file that max_batch.py wrote (results/max_batch.json
// and max_batch_steps.json) and returns the GPU it ran on and its runs.
func MaxBatchRuns(path string) (gpu string, runs []MaxBatchRun, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	var f struct {
		GPU       string        `json:"gpu"`
		Scenarios []MaxBatchRun `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return "", nil, fmt.Errorf("measured: %s: %w", filepath.Base(path), err)
	}
	if len(f.Scenarios) == 0 {
		return "", nil, fmt.Errorf("measured: %s: no scenarios", filepath.Base(path))
	}
	return f.GPU, f.Scenarios, nil
}
