package onnxmem_test

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestRunGPUs runs a short training run of yolov9-t as DistributedDataParallel
// over two GPUs: every rank trains half the batch with DDP's buckets, rank
// 0 alone validates and saves, each card holds NCCL's share beside the
// context; the max batch over the GPUs is a multiple of them whose run
// completes on every rank, and the next multiple's does not.
func TestRunGPUs(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	plan := onnxmem.RunPlan{Epochs: 1, Iterations: 3, Batch: 8, Height: 640, Width: 640, ValImages: 32, MeanBoxes: 7.3, Seed: 1}
	events, err := m.PlanRun(plan)
	if err != nil {
		t.Fatal(err)
	}
	one, err := m.Run(onnxmem.Scenario{Batch: 8, AMP: true}, events)
	if err != nil {
		t.Fatal(err)
	}
	two, err := m.Run(onnxmem.Scenario{Batch: 16, AMP: true, GPUs: 2}, events)
	if err != nil {
		t.Fatal(err)
	}
	switch o := two.Others; {
	case o == nil:
		t.Fatal("a run over two GPUs has no other ranks' run")
	case two.NCCL <= 0 || o.NCCL != two.NCCL:
		t.Errorf("NCCL's bytes %d on rank 0, %d on the others: want the same, above 0", two.NCCL, o.NCCL)
	case two.Peak <= one.Peak:
		t.Errorf("rank 0 at 8 images under DDP peaks at %d, the same run without DDP at %d: DDP's bucket adds a copy of every gradient", two.Peak, one.Peak)
	case o.Peak >= two.Peak:
		t.Errorf("the other ranks peak at %d, rank 0 at %d: they keep no EMA and do not validate", o.Peak, two.Peak)
	case two.Scenario.Batch != 16 || two.Scenario.GPUs != 2:
		t.Errorf("the result's scenario says batch %d over %d GPUs, want the 16 over 2 given", two.Scenario.Batch, two.Scenario.GPUs)
	}
	for i, s := range two.Others.Steps {
		if i > 0 && events[i].Kind != "train" && s.Allocated != two.Others.Steps[i-1].Allocated {
			t.Errorf("event %d (%s) changes the other ranks' memory: only rank 0 validates and saves", i, events[i].Kind)
		}
	}
	if r, err := m.Run(onnxmem.Scenario{Batch: 8, AMP: true, GPUs: 1}, events); err != nil || r.Others != nil || r.NCCL == 0 {
		t.Errorf("DDP on one GPU: err %v, other ranks %v, NCCL %d; want rank 0 alone, with NCCL", err, r != nil && r.Others != nil, r.NCCL)
	}

	sc := onnxmem.Scenario{AMP: true, GPUs: 2, Device: "t4"}
	small := onnxmem.RunPlan{Epochs: 1, Iterations: 4, ValImages: 16, MeanBoxes: 7.3, Seed: 1}
	n, r, err := m.MaxBatchRun(sc, small, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n%2 != 0 || n < 2 || r == nil || r.OOM {
		t.Fatalf("max batch over 2 GPUs %d (result %v): want an even batch whose run completes", n, r)
	}
	for _, b := range []int64{n, n + 2} {
		q := small
		q.Batch, q.Height, q.Width, q.GPUs = b/2, 640, 640, 2
		evs, err := m.PlanRun(q)
		if err != nil {
			t.Fatal(err)
		}
		s := sc
		s.Batch = b
		got, err := m.Run(s, evs)
		if err != nil {
			t.Fatal(err)
		}
		fails := got.OOM || got.Others.OOM
		if fails != (b > n) {
			t.Errorf("batch %d over 2 GPUs on a T4: runs out of memory %v; the max batch is %d", b, fails, n)
		}
	}

	for _, tc := range []struct {
		sc   onnxmem.Scenario
		want string
	}{
		{onnxmem.Scenario{Batch: 15, GPUs: 2}, "batch 15 over 2 GPUs: the batch must be a multiple"},
		{onnxmem.Scenario{Batch: 16, GPUs: -1}, "gpus -1"},
		{onnxmem.Scenario{Batch: 16, SyncBN: true}, "sync_bn without gpus"},
	} {
		if _, err := m.Run(tc.sc, events); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.sc, err, tc.want)
		}
	}
	if _, err := m.Simulate(onnxmem.Scenario{Step: onnxmem.TrainStep, Batch: 16, GPUs: 2}); err == nil || !strings.Contains(err.Error(), "simulated for whole training runs") {
		t.Errorf("a train step over 2 GPUs: error %v, want one saying DDP is simulated for runs", err)
	}
	if _, err := m.Simulate(onnxmem.Scenario{Batch: 16, GPUs: 2}); err == nil || !strings.Contains(err.Error(), "GPUs applies to train steps") {
		t.Errorf("a model step over 2 GPUs: error %v, want one saying GPUs is a train step's", err)
	}
}
