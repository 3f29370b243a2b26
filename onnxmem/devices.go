package onnxmem

import (
	"fmt"
	"strings"
)

// Device is a GPU that people train on, as PyTorch sees it.
type Device struct {
	// Name is the short name used on the command line, such as "a100-40".
	Name string
	// Long is the marketing name.
	Long string
	// Total is the memory that torch.cuda.get_device_properties reports
	// (total_memory), in bytes.
	Total int64
	// Context is the memory that the CUDA context takes on the device
	// (driver, kernels, cuDNN and cuBLAS handles), which no PyTorch counter
	// sees but nvidia-smi does.
	Context int64
	// CuBLASWorkspace is PyTorch's default cuBLAS workspace on the device.
	CuBLASWorkspace int64
	// Sources says where each figure comes from, or marks it an
	// assumption.
	Sources string
}

// Usable is the memory left for PyTorch's caching allocator: the total less
// the CUDA context.
func (d Device) Usable() int64 { return d.Total - d.Context }

const (
	mib = int64(1) << 20
	// hopperCuBLAS is CUBLAS_WORKSPACE_CONFIG ":4096:8", PyTorch's default on
	// compute capability 9.0 (aten/src/ATen/cuda/CublasHandlePool.cpp).
	hopperCuBLAS = 32 * mib
	// olderCuBLAS is ":4096:2:16:8", the default before Hopper: two 4 MiB
	// and eight 16 KiB chunks.
	olderCuBLAS = 8*mib + 128<<10
	// contextAssumed is the CUDA context onnxmem assumes on every device: a
	// few hundred MiB with CUDA 12–13 and lazy module loading, more with
	// large kernel libraries. An assumption, not a measurement: nvidia-smi
	// on the card tells the real figure.
	contextAssumed = 512 * mib
)

// Devices lists the cards onnxmem knows, in the order tables print them.
// Totals are what PyTorch reports as the card's total memory, a little less
// than the vendor's figure; each entry's Sources says where it comes from.
var Devices = []Device{
	{Name: "h200", Long: "NVIDIA H200 141 GB", Total: 150109880320, Context: contextAssumed, CuBLASWorkspace: hopperCuBLAS,
		Sources: "total: torch.cuda.get_device_properties on an H200 (shared/groundtruth/models.json); context: assumption"},
	{Name: "h100-80", Long: "NVIDIA H100 80 GB", Total: 81008 * mib, Context: contextAssumed, CuBLASWorkspace: hopperCuBLAS,
		Sources: "total: 79.11 GiB, the total capacity of public out-of-memory reports (assumption); context: assumption"},
	{Name: "a100-80", Long: "NVIDIA A100 80 GB", Total: 81050 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 79.15 GiB, the total capacity of public out-of-memory reports (assumption); context: assumption"},
	{Name: "a100-40", Long: "NVIDIA A100 40 GB", Total: 40536 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 40536 MiB (39.59 GiB), as nvidia-smi and public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "v100-32", Long: "NVIDIA V100 32 GB", Total: 32510 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 32510 MiB (31.75 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "v100-16", Long: "NVIDIA V100 16 GB", Total: 16160 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 16160 MiB (15.78 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "rtx4090", Long: "NVIDIA GeForce RTX 4090 24 GB", Total: 24217 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 24217 MiB (23.65 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "rtx3090", Long: "NVIDIA GeForce RTX 3090 24 GB", Total: 24259 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 24259 MiB (23.69 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "l4", Long: "NVIDIA L4 24 GB", Total: 23034 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 23034 MiB, as nvidia-smi gives it (assumption); context: assumption"},
	{Name: "t4", Long: "NVIDIA T4 16 GB", Total: 15110 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 15110 MiB (14.76 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
}

// LookupDevice returns the device of a name (case does not matter).
func LookupDevice(name string) (Device, error) {
	var names []string
	for _, d := range Devices {
		if strings.EqualFold(d.Name, name) {
			return d, nil
		}
		names = append(names, d.Name)
	}
	return Device{}, fmt.Errorf("onnxmem: unknown device %q: want one of %s", name, strings.Join(names, ", "))
}

// Fits reports whether a step fits on a device: the segments it reserves at
// its peak, plus the CUDA context, within the card's memory. A step whose
// reserved memory crosses that line runs out of memory when cudaMalloc fails
// (after the allocator has released its cache and retried).
func (d Device) Fits(r *Result) bool {
	return r.PeakReserved <= d.Usable()
}

// MaxBatchOn returns the largest batch size, at most limit, whose step fits
// on the device (Device.Fits), with its Result; 0 and nil when not even batch
// 1 fits. The scenario's cuBLAS workspace becomes the device's.
func (m *Model) MaxBatchOn(d Device, sc Scenario, limit int64) (int64, *Result, error) {
	sc.CuBLASWorkspace = d.CuBLASWorkspace
	lo, hi := int64(0), limit
	var best *Result
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		sc.Batch = mid
		r, err := m.Simulate(sc)
		if err != nil {
			return 0, nil, err
		}
		if d.Fits(r) {
			lo, best = mid, r
		} else {
			hi = mid - 1
		}
	}
	return lo, best, nil
}
