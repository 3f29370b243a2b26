package main

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// TestDiffGPUSnapshot reads back snapshots taken on the H200
// (calibration/gpu_snapshot.py: resnet18's measured model step at batch 8,
// fp32 and AMP, torch.cuda.memory._dump_snapshot) and compares them with
// the simulated step: every allocation and free agrees in size and order
// up to the harness's last three events (it frees the output before the
// loss and keeps the input), and the requested peaks are equal.
func TestDiffGPUSnapshot(t *testing.T) {
	model := onnxbuild.Shared(t, "torchvision/resnet18-train.onnx")
	for _, tc := range []struct {
		prec, agree string
		args        []string
	}{
		{"fp32", "the same event at the same place: 468 of 471", nil},
		{"amp", "the same event at the same place: 562 of 565", []string{"-amp"}},
	} {
		args := append([]string{"diff", "-batch", "8", "-img", "224"}, tc.args...)
		args = append(args, measured.Path("snapshots/resnet18-b8-")+tc.prec+".pickle", model)
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 {
			t.Fatalf("%s: exit code %d: %s", tc.prec, code, stderr)
		}
		if !strings.Contains(stdout, tc.agree) || !strings.Contains(stdout, "(+0.00%)") {
			t.Errorf("%s: want %q and equal requested peaks:\n%s", tc.prec, tc.agree, stdout)
		}
	}
}
