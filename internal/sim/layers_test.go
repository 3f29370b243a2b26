package sim_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestLayerProfile compares memory_allocated() after each top-level layer's
// forward, as groundtruth/layers.jsonl measured it with forward hooks, with the
// simulated forward at the same moments (Program.LayerEnds). The profile ran
// from a cold allocator with only the model and the input resident, which is
// how the simulation starts here. Each layer must be within 8 MiB.
func TestLayerProfile(t *testing.T) {
	f, err := os.Open(onnxbuild.Shared(t, "groundtruth/layers.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	checked := 0
	for sc.Scan() {
		var r struct {
			Cfg        string
			Amp        bool
			Batch, Img int64
			M0         int64
			Layers     []struct {
				Alloc int64
				I     int
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		s := sim.Options{Batch: r.Batch, Height: r.Img, Width: r.Img, AMP: r.Amp}
		if s.Supported() != nil {
			t.Logf("%s b%d amp=%v: not simulated yet", r.Cfg, r.Batch, r.Amp)
			continue
		}
		m, err := sim.Load(filepath.Join(onnxbuild.SharedDir, "yolov9", r.Cfg+"-train.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.Program(s)
		if err != nil {
			t.Fatal(err)
		}
		got := forwardAtLayerEnds(p)
		const tol = 8 << 20
		for _, l := range r.Layers {
			want := l.Alloc - r.M0
			// A layer without ops in the graph (Silence returns its input)
			// ends where the previous one did.
			g, prev := int64(0), l.I
			for ; prev >= 0; prev-- {
				if v, ok := got[prev]; ok {
					g = v
					break
				}
			}
			t.Logf("%s b%d layer %2d  measured %9.1f MiB  predicted %9.1f MiB  %+6.1f MiB", r.Cfg, r.Batch, l.I, mib(want), mib(g), mib(g-want))
			if d := g - want; d > tol || d < -tol {
				t.Errorf("%s b%d layer %d: predicted %d bytes after the layer, measured %d (off by %.1f MiB)", r.Cfg, r.Batch, l.I, g, want, mib(d))
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no fp32 layer profile in layers.jsonl")
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// forwardAtLayerEnds replays the forward from a cold allocator holding the
// model and the input, and returns the allocated bytes beyond those at each
// layer end.
func forwardAtLayerEnds(p *schedule.Program) map[int]int64 {
	a := allocator.New()
	for _, b := range p.Resident {
		a.Malloc(p.Buffers[b].Bytes)
	}
	a.Malloc(p.Buffers[p.Input].Bytes)
	m0 := a.Stats().Allocated
	ids := make([]allocator.ID, len(p.Buffers))
	at := make(map[int]int64)
	k := 0
	for i, e := range p.Events[:p.ForwardEnd] {
		for ; k < len(p.LayerEnds) && p.LayerEnds[k].Event == i; k++ {
			at[p.LayerEnds[k].Layer] = a.Stats().Allocated - m0
		}
		if e.Free {
			a.Free(ids[e.Buf])
		} else {
			ids[e.Buf] = a.Malloc(p.Buffers[e.Buf].Bytes)
		}
	}
	for ; k < len(p.LayerEnds); k++ {
		at[p.LayerEnds[k].Layer] = a.Stats().Allocated - m0
	}
	return at
}
