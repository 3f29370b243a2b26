// Package cards holds the GPUs people train on as PyTorch sees them: their
// total memory, the CUDA context, PyTorch's cuBLAS workspace on them, and
// where each figure comes from; and the sizes people write ("24GB",
// "23.5GiB").
package cards

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Device is a card as PyTorch sees it: its short Name ("a100-40") and Long
// one, its compute Capability ("8.9"; "" for a card known by its size
// alone), its Total memory as get_device_properties reports it, the CUDA
// Context that no PyTorch counter sees, PyTorch's default cuBLAS workspace
// on it, and the Sources of these figures, which mark assumptions.
type Device struct {
	Name, Long, Capability          string
	Total, Context, CuBLASWorkspace int64
	Sources                         string
}

// BF16 reports whether the card runs bfloat16 autocast: compute
// capability 8.0 (Ampere) or newer, torch.cuda.is_bf16_supported(); true
// for a card of unknown capability.
func (d Device) BF16() bool {
	c, err := strconv.ParseFloat(d.Capability, 64)
	return err != nil || c >= 8
}

// Flash reports whether PyTorch runs its flash attention kernel on the
// card: compute capability 8.0 and newer (sdp_utils.cpp's
// check_flash_attention_hardware_support takes 8.0 to 12.1, beyond every
// listed card); true for a card of unknown capability. Below,
// scaled_dot_product_attention takes the memory-efficient kernel in half
// precision too.
func (d Device) Flash() bool {
	c, err := strconv.ParseFloat(d.Capability, 64)
	return err != nil || c >= 8
}

// Measured reports whether cuDNN's convolution workspaces were measured
// on the card: the H200's table (package cudnn), which the H100's
// measurements match call for call. On any other card, and on one given
// by its size, cuDNN's heuristics may choose other engines.
func (d Device) Measured() bool {
	return strings.HasPrefix(d.Long, "NVIDIA H200") || strings.HasPrefix(d.Long, "NVIDIA H100")
}

// Usable is the caching allocator's limit on the card: the total less the
// CUDA context.
func (d Device) Usable() int64 { return d.Total - d.Context }

// NCCL is what NCCL holds on each rank's card, outside the caching
// allocator, in a process of DistributedDataParallel: measured with world
// size 1 on an H100 (torch 2.11 and its NCCL; calibration §23: 564 MiB
// more than the same run without DDP, from the setup on). Over several
// GPUs NCCL's buffers grow with the peers and channels; that growth is
// not counted.
const NCCL = 564 * mib

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
	// hopperContext is what a training process holds on an H100 beyond the
	// caching allocator (cudaMemGetInfo's used less memory_reserved()): the
	// CUDA context with the kernels that a detector's train step loads,
	// lazily, with CUDA 13.0, driver 580 and PyTorch 2.11, the same after
	// an AMP step of a small detector and a float32 one of a large one
	// (calibration/results/train_step_ctx.jsonl, "outside_allocator"): 527
	// MiB right after CUDA init (calibration §22), more as kernels load.
	hopperContext = 743243776
	// turingContext bounds the context on a T4: public training runs of a
	// detector on T4s reserved up to 14.44 GiB of its 14.76 (issue 34), so
	// the context with its kernels took at most about 320 MiB there.
	turingContext = 320 * mib
)

// devices lists the cards onnxmem knows, in the order tables print them.
// Totals are what PyTorch reports as the card's total memory, a little less
// than the vendor's figure; each entry's Sources says where it comes from.
var devices = []Device{
	{Name: "h200", Long: "NVIDIA H200 141 GB", Capability: "9.0", Total: 150109880320, Context: hopperContext, CuBLASWorkspace: hopperCuBLAS,
		Sources: "total: torch.cuda.get_device_properties on an H200 (shared/groundtruth/models.json); context: the H100's, measured in a training process (calibration §22), assumed the same"},
	{Name: "h100-80", Long: "NVIDIA H100 80 GB", Capability: "9.0", Total: 85017493504, Context: hopperContext, CuBLASWorkspace: hopperCuBLAS,
		Sources: "total: torch.cuda.get_device_properties on an H100 80GB HBM3 (calibration/results/cudnn_fallback.json); context: measured there in a training process (calibration §22)"},
	{Name: "a100-80", Long: "NVIDIA A100 80 GB", Capability: "8.0", Total: 81050 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 79.15 GiB, the total capacity of public out-of-memory reports (assumption); context: assumption"},
	{Name: "a100-40", Long: "NVIDIA A100 40 GB", Capability: "8.0", Total: 40536 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 40536 MiB (39.59 GiB), as nvidia-smi and public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "v100-32", Long: "NVIDIA V100 32 GB", Capability: "7.0", Total: 32510 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 32510 MiB (31.75 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "v100-16", Long: "NVIDIA V100 16 GB", Capability: "7.0", Total: 16160 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 16160 MiB (15.78 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "rtx4090", Long: "NVIDIA GeForce RTX 4090 24 GB", Capability: "8.9", Total: 24217 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 24217 MiB (23.65 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "rtx3090", Long: "NVIDIA GeForce RTX 3090 24 GB", Capability: "8.6", Total: 24259 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 24259 MiB (23.69 GiB), as public out-of-memory reports give it (assumption); context: assumption"},
	{Name: "l4", Long: "NVIDIA L4 24 GB", Capability: "8.9", Total: 23034 * mib, Context: contextAssumed, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 23034 MiB, as nvidia-smi gives it (assumption); context: assumption"},
	{Name: "t4", Long: "NVIDIA T4 16 GB", Capability: "7.5", Total: 15110 * mib, Context: turingContext, CuBLASWorkspace: olderCuBLAS,
		Sources: "total: 15110 MiB (14.76 GiB), as public out-of-memory reports give it (assumption); context: at most 320 MiB, as public training runs on T4s reserved up to 14.44 GiB (assumption)"},
}

// List returns the cards onnxmem knows, in the order tables print them.
// Totals are what PyTorch reports as total_memory; Sources says where each
// figure comes from.
func List() []Device { return slices.Clone(devices) }

// lookup returns the device of a name. Case, spaces, dashes and
// underscores, a leading "NVIDIA" or "GeForce" and a trailing "GB" do not
// matter, so "A100-40GB", "NVIDIA GeForce RTX 4090" and "4090" name
// devices too; a family name that fits one listed card only ("h100")
// names it, and one that fits several ("a100") is an error naming them.
func lookup(name string) (Device, error) {
	var names []string
	for _, d := range devices {
		if strings.EqualFold(d.Name, name) {
			return d, nil
		}
		names = append(names, d.Name)
	}
	key := deviceKey(name)
	var fits []Device
	for _, d := range devices {
		k := deviceKey(d.Name)
		switch {
		case key == "":
		case k == key || strings.TrimPrefix(k, "rtx") == key:
			return d, nil
		case strings.HasPrefix(k, key):
			fits = append(fits, d)
		}
	}
	switch len(fits) {
	case 1:
		return fits[0], nil
	case 0:
		return Device{}, fmt.Errorf("onnxmem: unknown device %q: want one of %s, or a size such as 24GB or 23.5GiB", name, strings.Join(names, ", "))
	}
	var fit []string
	for _, d := range fits {
		fit = append(fit, d.Name)
	}
	return Device{}, fmt.Errorf("onnxmem: device %q fits %s: give one of them (a card's memory tells them apart), or its size such as 40GB", name, strings.Join(fit, " and "))
}

// deviceKey is a device name without what lookup ignores: "NVIDIA
// GeForce RTX 4090" and "rtx-4090" are "rtx4090", "A100-40GB" is
// "a10040".
func deviceKey(name string) string {
	k := strings.ToLower(name)
	for _, p := range []string{"nvidia", "geforce"} {
		k = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(k), p))
	}
	k = strings.NewReplacer(" ", "", "-", "", "_", "").Replace(k)
	return strings.TrimSuffix(k, "gb")
}

// newDevice returns a card of total bytes, as torch.cuda.mem_get_info or
// get_device_properties reports its total, with a CUDA context of context
// bytes (contextAssumed when 0). Its cuBLAS workspace is
// hopperCuBLAS, the larger of PyTorch's two defaults.
func newDevice(total, context int64) (Device, error) {
	if context == 0 {
		context = contextAssumed
	}
	if total <= 0 || context < 0 || context >= total {
		return Device{}, fmt.Errorf("onnxmem: a device of %d bytes with a CUDA context of %d: the total must be positive and larger than the context", total, context)
	}
	name := FormatBytes(total)
	return Device{Name: name, Long: "a card of " + name, Total: total, Context: context, CuBLASWorkspace: hopperCuBLAS,
		Sources: "total: given; context: " + map[bool]string{true: "assumption", false: "given"}[context == contextAssumed] +
			"; cuBLAS workspace: the Hopper default (assumption)"}, nil
}

// Parse returns the card s names: a listed one, its case, spaces,
// dashes, "NVIDIA", "GeForce" and "GB" ignored ("A100-40GB", "4090"), or a
// size as total_memory, decimal or binary ("24GB", "23.5GiB"); either
// optionally with its CUDA context ("4090+ctx=400MiB", "24GB+ctx=600MiB"),
// the memory outside PyTorch's counters that nvidia-smi shows for a
// process which has allocated nothing.
func Parse(s string) (Device, error) {
	if d, err := lookup(s); err == nil {
		return d, nil
	}
	name, ctx, hasCtx := strings.Cut(s, "+")
	d, lerr := lookup(name)
	if lerr != nil {
		total, err := ParseBytes(name)
		if err != nil {
			return Device{}, lerr
		}
		if d, err = newDevice(total, 0); err != nil {
			return Device{}, err
		}
		d.Name = name
	}
	if !hasCtx {
		return d, nil
	}
	v, ok := strings.CutPrefix(ctx, "ctx=")
	if !ok {
		return Device{}, fmt.Errorf("onnxmem: device %q: after + want ctx=SIZE, the CUDA context, such as +ctx=600MiB", s)
	}
	context, err := ParseBytes(v)
	if err != nil {
		return Device{}, fmt.Errorf("onnxmem: device %q: the CUDA context: %w", s, err)
	}
	if context >= d.Total {
		return Device{}, fmt.Errorf("onnxmem: device %q: a CUDA context of %s leaves nothing of the card's %s: give the context, such as +ctx=400MiB", s, FormatBytes(context), FormatBytes(d.Total))
	}
	d.Context = context
	d.Name = s
	d.Sources = strings.Replace(d.Sources, "context: assumption", "context: given", 1)
	return d, nil
}

// byteUnits are the units ParseBytes takes, longest first.
var byteUnits = []struct {
	name string
	size float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"B", 1},
}

// ParseBytes reads a size with its unit: B, KB, MB, GB, TB (powers of
// 1000; K, M, G and T too, as training logs print G) or KiB, MiB, GiB,
// TiB (powers of 1024), case ignored, decimals allowed: "24GB", "24G",
// "23.5GiB", "600MiB". The size must be below 1 EiB.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	for _, u := range byteUnits {
		if len(t) > len(u.name) && strings.EqualFold(t[len(t)-len(u.name):], u.name) {
			x, err := strconv.ParseFloat(strings.TrimSpace(t[:len(t)-len(u.name)]), 64)
			if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) || x*u.size >= 1<<60 {
				break
			}
			return int64(math.Round(x * u.size)), nil
		}
	}
	return 0, fmt.Errorf("onnxmem: size %q: want a number and a unit, such as 24GB, 23.5GiB or 600MiB", s)
}

// FormatBytes writes a size in the largest binary unit that keeps it at
// least 1, with up to two decimals: "23.50GiB", "600MiB", "512B".
func FormatBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			v := strconv.FormatFloat(float64(n)/float64(u.size), 'f', 2, 64)
			v = strings.TrimSuffix(strings.TrimRight(v, "0"), ".")
			return v + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
