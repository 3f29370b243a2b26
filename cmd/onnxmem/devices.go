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
		"Devices lists the device profiles that maxbatch -device and report use: each\ncard's total memory as PyTorch reports it, the CUDA context assumed on it, the\nmemory left usable for PyTorch's caching allocator (total less context),\nPyTorch's default cuBLAS workspace on it, whether cuDNN's workspaces were\nmeasured there (elsewhere every answer is a band) and whether bfloat16 runs,\nthen where each figure comes from.\nA step fits a card when it runs to its end with the caching allocator limited\nto the usable memory, as PyTorch runs it (it releases its cache and retries\nbefore it runs out of memory). -device also takes a size: 24GB, 23.5GiB,\noptionally +ctx=600MiB.",
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
	fmt.Fprintf(tw, "%-*s\tsm\ttotal GiB\tcontext GiB\tusable GiB\tcuBLAS MiB\tcuDNN\tbf16\tflash\t  model\n", width, "device")
	for _, d := range ds {
		js := newDeviceJSON(d)
		yes := map[bool]string{true: "yes", false: "no"}
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t  %s\n", width, d.Name, cmpOr(d.Capability, "?"), gib(d.Total), gib(d.Context), gib(d.Usable()),
			strconv.FormatFloat(float64(d.CuBLASWorkspace)/(1<<20), 'f', -1, 64), js.Workspaces, yes[js.BF16], yes[js.Flash], d.Long)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, "\nusable: total less the CUDA context, the limit of PyTorch's caching allocator; a\n"+
		"step fits when it runs to its end under it. cuBLAS: PyTorch's default\n"+
		"workspace, made by a step's first matrix product or found resident. cuDNN: its workspaces measured on\n"+
		"the card, or a band (from none to the H200's) in every answer. bf16: bfloat16\n"+
		"autocast runs there (sm 8.0 and newer). flash: scaled_dot_product_attention's\n"+
		"flash kernel (sm 8.0 and newer); below, its memory-efficient kernel in every\n"+
		"type. torch 2.11's cu128 and cu130 builds need\n"+
		"sm 7.5; an older card runs its cu126 build.\n\nsources:\n")
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
	// Workspaces is "measured" where cuDNN's workspaces were measured
	// (Device.Exact), else "band"; BF16 says bfloat16 autocast runs there
	// (sm 8.0 and newer), Flash that scaled_dot_product_attention has its
	// flash kernel there (sm 8.0 and newer); TorchBuilds are the CUDA
	// builds of torch 2.11 made for the card ("" when its compute
	// capability is unknown).
	Workspaces  string `json:"cudnn_workspaces"`
	BF16        bool   `json:"bf16"`
	Flash       bool   `json:"flash_attention"`
	TorchBuilds string `json:"torch_builds,omitempty"`
	Sources     string `json:"sources,omitempty"`
}

func newDeviceJSON(d onnxmem.Device) deviceJSON {
	js := deviceJSON{Name: d.Name, Model: d.Long, Capability: d.Capability, Total: d.Total, Context: d.Context, Usable: d.Usable(),
		CuBLASWorkspace: d.CuBLASWorkspace, Workspaces: "band", BF16: true, Flash: true, Sources: d.Sources}
	if d.Exact() {
		js.Workspaces = "measured"
	}
	if c, err := strconv.ParseFloat(d.Capability, 64); err == nil {
		// torch 2.11's CUDA 12.8 and 13.0 wheels are built for sm 7.5 and
		// newer; its CUDA 12.6 build still covers sm 5.0 to 9.0.
		js.BF16, js.Flash, js.TorchBuilds = c >= 8, c >= 8, "cu126"
		if c >= 7.5 {
			js.TorchBuilds = "cu126, cu128, cu130"
		}
	}
	return js
}
