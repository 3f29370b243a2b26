package main

import (
	"os"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// writeSnapshot writes sc's snapshot to path as
// torch.cuda.memory._dump_snapshot() writes one (Model.WriteSnapshot), for
// PyTorch's memory_viz.
func writeSnapshot(path string, m *onnxmem.Model, sc onnxmem.Scenario) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := m.WriteSnapshot(f, sc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
