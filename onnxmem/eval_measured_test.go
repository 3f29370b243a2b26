package onnxmem_test

import (
	"fmt"
	"testing"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func TestEvalExplore(t *testing.T) {
	for _, cfg := range []string{"yolov9-t", "yolov9-s", "yolov9-c", "yolov9-e"} {
		m, err := onnxmem.Builtin(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, hw := range [][3]int64{{32, 640, 640}, {64, 640, 640}, {128, 640, 640}, {64, 384, 640}} {
			r, err := m.Simulate(onnxmem.Scenario{Batch: hw[0], Height: hw[1], Width: hw[2], Eval: true})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("%s b%d %dx%d peak %.1f req %.1f res %.1f m0 %.1f after %.1f at %s %s L%d\n", cfg, hw[0], hw[1], hw[2],
				float64(r.Peak)/(1<<20), float64(r.PeakRequested)/(1<<20), float64(r.PeakReserved)/(1<<20), float64(r.M0)/(1<<20), float64(r.AfterForward)/(1<<20), r.PeakPhase, r.PeakNode, r.PeakLayer)
			for _, x := range r.AtPeak[:8] {
				fmt.Printf("    %-40s %-10s %10.1f %s\n", x.Name, x.Kind, float64(x.Bytes)/(1<<20), x.Node)
			}
		}
	}
}
