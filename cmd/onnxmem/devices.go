package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdDevices(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("devices",
		"onnxmem devices [-json|-csv]",
		"Devices lists the device profiles that maxbatch -device and report use: each\ncard's total memory as PyTorch reports it, the CUDA context assumed on it, the\nmemory left usable for PyTorch's caching allocator (total less context) and\nPyTorch's default cuBLAS workspace on it, then where each figure comes from.\nA step fits a card when it runs to its end with the caching allocator limited\nto the usable memory, as PyTorch runs it (it releases its cache and retries\nbefore it runs out of memory). -device also takes a size: 24GB, 23.5GiB,\noptionally +ctx=600MiB.",
		"onnxmem devices -json")
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	if code, ok := f.parseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	var err error
	if *asCSV {
		rows := make([]deviceJSON, len(onnxmem.Devices()))
		for i, d := range onnxmem.Devices() {
			rows[i] = newDeviceJSON(d)
		}
		return exit(stderr, writeCSV(stdout, rows))
	}
	if *asJSON {
		js := devicesJSON{Devices: make([]deviceJSON, len(onnxmem.Devices()))}
		for i, d := range onnxmem.Devices() {
			js.Devices[i] = newDeviceJSON(d)
		}
		err = writeJSON(stdout, js)
	} else {
		err = printDevices(stdout, onnxmem.Devices())
	}
	return exit(stderr, err)
}

func printDevices(w io.Writer, ds []onnxmem.Device) error {
	width := len("device")
	for _, d := range ds {
		width = max(width, len(d.Name))
	}
	tw := newTable(w)
	// Names are padded so that the right-aligned table shows them aligned left.
	fmt.Fprintf(tw, "%-*s\tsm\ttotal GiB\tcontext GiB\tusable GiB\tcuBLAS MiB\t  model\n", width, "device")
	for _, d := range ds {
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%s\t  %s\n", width, d.Name, cmpOr(d.Capability, "?"), gib(d.Total), gib(d.Context), gib(d.Usable()),
			strconv.FormatFloat(float64(d.CuBLASWorkspace)/(1<<20), 'f', -1, 64), d.Long)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, "\nusable: total less the CUDA context, the limit of PyTorch's caching allocator; a\n"+
		"step fits when it runs to its end under it. cuBLAS: PyTorch's default\n"+
		"workspace, resident in train and eval steps.\n\nsources:\n")
	for _, d := range ds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, d.Name, d.Sources)
	}
	return nil
}

type devicesJSON struct {
	Devices []deviceJSON `json:"devices"`
}

// deviceJSON is a device profile, sizes in bytes.
type deviceJSON struct {
	Name            string `json:"name"`
	Model           string `json:"model"`
	Capability      string `json:"compute_capability,omitempty"`
	Total           int64  `json:"total"`
	Context         int64  `json:"context"`
	Usable          int64  `json:"usable"`
	CuBLASWorkspace int64  `json:"cublas_workspace"`
	Sources         string `json:"sources,omitempty"`
}

func newDeviceJSON(d onnxmem.Device) deviceJSON {
	return deviceJSON{Name: d.Name, Model: d.Long, Capability: d.Capability, Total: d.Total, Context: d.Context, Usable: d.Usable(),
		CuBLASWorkspace: d.CuBLASWorkspace, Sources: d.Sources}
}
