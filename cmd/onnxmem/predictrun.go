package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// runFields are a train_run line's fields beyond commonFields: the
// training scenario, without a step's box counts (each train event has
// its own), and the events.
var runFields = []string{"batch", "img", "img_h", "img_w", "amp", "amp_dtype", "segments", "nc", "optimizer", "ema", "trainer", "warm_steps", "gpus", "rank", "sync_bn", "events"}

// runEventFields are the fields each kind of run event takes.
var runEventFields = map[string][]string{
	"setup": nil,
	"train": {"boxes_per_img", "skipped"},
	"val":   {"batch", "img", "img_h", "img_w", "boxes_per_img"},
	"ckpt":  nil,
}

// trainRun predicts a train_run line: the run's scenario and its events,
// each {"setup": {}}, {"train": {"boxes_per_img": [...]}}, {"val":
// {"batch", "img_h", "img_w", "boxes_per_img"}} or {"ckpt": {}}.
func (p *predictor) trainRun(obj map[string]json.RawMessage) (prediction, error) {
	// The step's reader wants a box count; the run's events carry them.
	step := make(map[string]json.RawMessage, len(obj))
	for k, v := range obj {
		if k != "events" && k != "gpus" && k != "rank" && k != "sync_bn" {
			step[k] = v
		}
	}
	step["boxes_per_img"] = json.RawMessage("0")
	sc, err := stepScenario(step, "train_step", false)
	if err != nil {
		return prediction{}, err
	}
	// DDP: "gpus" ranks (torch.distributed.run --nproc_per_node), "batch"
	// the total that train_dual.py's --batch gives, each rank its share.
	_, ranked := obj["rank"]
	if err := errors.Join(field(obj, "gpus", &sc.GPUs, false), field(obj, "rank", &sc.Rank, false), field(obj, "sync_bn", &sc.SyncBN, false)); err != nil {
		return prediction{}, err
	}
	switch {
	case sc.GPUs < 0:
		return prediction{}, fmt.Errorf("onnxmem: train_run: gpus %d: want the GPUs of DDP (1 or more), or 0 for one process without it", sc.GPUs)
	case sc.GPUs > 0 && sc.Batch%sc.GPUs != 0:
		return prediction{}, fmt.Errorf("onnxmem: train_run: batch %d over %d GPUs: the batch must be a multiple of the GPUs (train_dual.py asserts it)", sc.Batch, sc.GPUs)
	case sc.GPUs > 0:
		sc.Batch /= sc.GPUs
	}
	var raw []map[string]json.RawMessage
	if err := field(obj, "events", &raw, true); err != nil {
		return prediction{}, fmt.Errorf("onnxmem: train_run: field \"events\": want a list of objects such as {\"train\": {\"boxes_per_img\": [3, 0, 12]}}")
	}
	events := make([]sim.RunEvent, len(raw))
	for i, ev := range raw {
		e, err := runEvent(ev, i, sc.Batch)
		if err != nil {
			return prediction{}, err
		}
		events[i] = sim.RunEvent(e)
	}
	m, err := p.model(obj)
	if err != nil {
		return prediction{}, err
	}
	r, err := m.Run(sc, events)
	if err != nil || sc.GPUs < 2 || ranked {
		return prediction{run: r}, err // "rank": that rank's run alone
	}
	sc.Rank = 1 // the ranks but 0 run alike
	o, err := m.Run(sc, events)
	return prediction{run: r, others: o}, err
}

// runEvent reads event i of a train_run line: an object with one key, the
// event's kind, whose value holds its fields.
func runEvent(ev map[string]json.RawMessage, i int, batch int64) (onnxmem.RunEvent, error) {
	var e onnxmem.RunEvent
	if len(ev) != 1 {
		return e, fmt.Errorf("onnxmem: train_run: event %d: want one key, setup, train, val or ckpt, not %d", i, len(ev))
	}
	for kind, body := range ev { // one key
		allowed, ok := runEventFields[kind]
		if !ok {
			return e, fmt.Errorf("onnxmem: train_run: event %d: unknown kind %q: want setup, train, val or ckpt", i, kind)
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(body, &f); err != nil || f == nil {
			return e, fmt.Errorf("onnxmem: train_run: event %d (%s): want an object, not %s", i, kind, body)
		}
		for _, name := range sortedKeys(f) {
			if !slices.Contains(allowed, name) {
				return e, fmt.Errorf("onnxmem: train_run: event %d (%s): unknown field %q (a %s event takes %s)", i, kind, name, kind, cmpOr(strings.Join(allowed, ", "), "no fields"))
			}
		}
		e.Kind = kind
		if err := field(f, "skipped", &e.Skipped, false); err != nil {
			return e, fmt.Errorf("onnxmem: train_run: event %d (%s): %w", i, kind, err)
		}
		n := batch
		if kind == "val" {
			var img int64
			errs := []error{field(f, "batch", &e.Batch, true), field(f, "img", &img, false),
				field(f, "img_h", &e.Height, false), field(f, "img_w", &e.Width, false)}
			for _, err := range errs {
				if err != nil {
					return e, fmt.Errorf("onnxmem: train_run: event %d (val): %w", i, err)
				}
			}
			switch {
			case e.Height == 0 && e.Width == 0 && img > 0:
				e.Height, e.Width = img, img
			case e.Height <= 0 || e.Width <= 0:
				return e, fmt.Errorf("onnxmem: train_run: event %d (val): give img_h and img_w (or img for a square batch)", i)
			case img != 0 && img != max(e.Height, e.Width):
				return e, fmt.Errorf("onnxmem: train_run: event %d (val): img %d with img_h %d and img_w %d: img is the larger side", i, img, e.Height, e.Width)
			}
			n = e.Batch
		}
		raw, ok := f["boxes_per_img"]
		if !ok && kind == "train" {
			return e, fmt.Errorf("onnxmem: train_run: event %d (train): missing field \"boxes_per_img\": give each image's count of boxes", i)
		}
		if ok {
			var each int64
			if json.Unmarshal(raw, &each) == nil {
				e.BoxCounts = slices.Repeat([]int64{each}, int(max(n, 0)))
			} else if err := json.Unmarshal(raw, &e.BoxCounts); err != nil {
				return e, fmt.Errorf("onnxmem: train_run: event %d (%s): field \"boxes_per_img\": %s is neither an integer nor a list of integers", i, kind, raw)
			}
			if j := slices.IndexFunc(e.BoxCounts, func(n int64) bool { return n < 0 }); j >= 0 {
				return e, fmt.Errorf("onnxmem: train_run: event %d (%s): field \"boxes_per_img\": image %d has %d boxes: give 0 or more", i, kind, j, e.BoxCounts[j])
			}
		}
	}
	return e, nil
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// runPredicted is a train_run line's answer: the peaks over the run, and
// the allocator's counters after each event (reserved_after of a train
// event is what GPU_mem shows, in bytes).
type runPredicted struct {
	Peak           int64    `json:"peak"`
	PeakReserved   int64    `json:"peak_reserved"`
	ReservedAfter  []int64  `json:"reserved_after"`
	AllocatedAfter []int64  `json:"allocated_after"`
	EventPeak      []int64  `json:"event_peak"`
	GPUMem         []string `json:"gpu_mem"`
	OOM            bool     `json:"oom,omitempty"`
	OOMEvent       *int     `json:"oom_event,omitempty"`
	// Others, in a DDP run over several GPUs, is the other ranks' run
	// (they run alike: no EMA, validation or checkpoint); the rest is
	// rank 0's.
	Others *runPredicted `json:"other_ranks,omitempty"`
}

func newRunPredicted(r *onnxmem.RunResult) runPredicted {
	js := runPredicted{Peak: r.Peak, PeakReserved: r.PeakReserved, OOM: r.OOM}
	for _, s := range r.Steps {
		js.ReservedAfter = append(js.ReservedAfter, s.Reserved)
		js.AllocatedAfter = append(js.AllocatedAfter, s.Allocated)
		js.EventPeak = append(js.EventPeak, s.Peak)
		js.GPUMem = append(js.GPUMem, s.GPUMem())
	}
	if r.OOM {
		js.OOMEvent = &r.OOMEvent
	}
	return js
}

// publicRun is the engine's run as the public one, for newRunPredicted:
// the figures, not the scenario.
func publicRun(r *sim.RunResult) *onnxmem.RunResult {
	out := &onnxmem.RunResult{Peak: r.Peak, PeakReserved: r.PeakReserved, OOM: r.OOM, OOMEvent: r.OOMEvent}
	for _, s := range r.Steps {
		out.Steps = append(out.Steps, onnxmem.RunStep(s))
	}
	return out
}
