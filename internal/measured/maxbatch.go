// Package measured is the one reader of calibration/results, the
// measurements that calibration/'s scripts recorded on the device, for
// the tests that compare onnxmem's predictions with them: where they lie
// (Dir, Path), how they are read (Read), and the formats that more
// than one test reads (MaxBatchRuns). It holds no numbers itself.
//
// Worked example: measured.Read("bf16.json") returns the bytes that
// calibration/bf16.py wrote, from whichever package folder the test runs
// in; measured.MaxBatchRuns("max_batch.json") the max batches that
// calibration/max_batch.py found, with the GPU they ran on.
package measured

import (
	"encoding/json"
	"fmt"
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

// MaxBatchRuns reads a file of calibration/results that max_batch.py wrote
// (max_batch.json and max_batch_steps.json) and returns the GPU it ran on
// and its runs.
func MaxBatchRuns(name string) (gpu string, runs []MaxBatchRun, err error) {
	b, err := Read(name)
	if err != nil {
		return "", nil, err
	}
	var f struct {
		GPU       string        `json:"gpu"`
		Scenarios []MaxBatchRun `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return "", nil, fmt.Errorf("measured: %s: %w", name, err)
	}
	if len(f.Scenarios) == 0 {
		return "", nil, fmt.Errorf("measured: %s: no scenarios", name)
	}
	return f.GPU, f.Scenarios, nil
}
