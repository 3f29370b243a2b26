package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestExplainSums checks Explain on every built-in YOLOv9 model and step
// kind: the kinds and the layers each sum to the allocated peak, the
// parameters are the model's bytes, and a train step's EMA copy and
// momentum are as large as its parameters.
func TestExplainSums(t *testing.T) {
	for _, name := range []string{"yolov9-t", "yolov9-s", "yolov9-m", "yolov9-c", "yolov9-e", "gelan-c"} {
		m, err := sim.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range []sim.Options{
			{Batch: 4, Height: 320, Width: 320},
			{Batch: 4, Height: 320, Width: 320, AMP: true, Segments: 2},
			{Batch: 4, Height: 320, Width: 320, AMP: true, Train: true, Boxes: 8, EMA: true},
			{Batch: 8, Height: 320, Width: 256, Eval: true},
		} {
			ex, err := m.Explain(sc)
			if err != nil {
				t.Fatal(err)
			}
			var kinds, layers int64
			by := map[string]int64{}
			for _, k := range ex.ByKind {
				kinds += k.Bytes
				by[k.Kind] = k.Bytes
			}
			for _, l := range ex.ByLayer {
				layers += l.Bytes
			}
			if kinds != ex.Peak || layers != ex.Peak || ex.Peak != ex.Result.Peak {
				t.Errorf("%s %+v: kinds sum to %d, layers to %d, peak %d", name, sc, kinds, layers, ex.Peak)
			}
			if by[sim.KindParameters] == 0 {
				t.Errorf("%s %+v: no parameters alive at the peak", name, sc)
			}
			if sc.Train {
				p := by[sim.KindParameters]
				for _, k := range []string{sim.KindCopy, sim.KindState} {
					// The EMA copies the buffers too; momentum only the
					// trainable parameters. Both within 5% of the model.
					if d := by[k] - p; d > p/20 || d < -p/20 {
						t.Errorf("%s train: %s %d bytes, parameters %d", name, k, by[k], p)
					}
				}
				if by[sim.KindLoss] == 0 && ex.Result.PeakPhase == "loss" {
					t.Errorf("%s train: the peak is in the loss, but no loss tensors are alive", name)
				}
			}
		}
	}
}
