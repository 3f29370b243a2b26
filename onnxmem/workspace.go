package onnxmem

import (
	"bytes"
	_ "embed"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/onnxmem/onnxmem/schedule"
)

// CuDNNWorkspace is the workspace that cuDNN 9 takes through PyTorch's caching
// allocator for one convolution call with torch.backends.cudnn.benchmark off.
//
// cuDNN's heuristics pick an algorithm per call from the shapes, and the
// workspace follows the algorithm: none, IN + OUT (the input and output
// transposed to NHWC for a tensor-core kernel), IN + OUT + W, a multiple of
// the weight (split-K partial sums), and more. The choice is not a formula
// of the shapes: a 1×1 float16 conv of 384 to 192 channels on a 40×40 map
// takes IN + OUT at batch 4 to 64 and nothing at batch 1 or 2, while a 1×1
// conv of 512 to 256 channels on the same map takes at most 272 bytes. So
// CuDNNWorkspace first looks the call up in a table measured on an H200 with
// cuDNN 9.19 and PyTorch 2.11 (calibration/conv_sweep.py: every convolution
// that the built-in models run at batch 1, 2, 4, ..., 64 on square images of
// 320 to 640 pixels and at every batch from 1 to 64 on 320, 352, 384, 416,
// 448, 512 and 640 (and most of 480), at batch 1 to 32 on square images of
// 672 to 1280 (every 32) and at batch 96 and 128 on 640, in
// float32 and float16, each of the three calls, exact to the byte; the
// torchvision networks' at 224, with their own padding); it is the behaviour of the library, not of
// any model step. A batch that the table lacks between two powers of two it
// holds for the shape gets the line through them (wsTable.interpolate); any
// other call (another model, image size or batch) gets the rule of
// cuDNNWorkspaceRule. A reduction (schedule.ColumnSum, ChannelSum) gets its
// staging, schedule.ReductionBytes. A bfloat16 call (ConvCall.BF16) is
// looked up in a second table, the same sweep's float16 convolutions at
// batch 1, 2, 4, ..., 64 measured in bfloat16 (conv_sweep.py --bf16), where
// cuDNN chose another workspace in 5%, 5% and 14% of the forward,
// backward-data and backward-filter calls; a batch that table lacks is
// float16's measured one where the float16 table has it, and a shape it
// lacks is taken as float16's.
func CuDNNWorkspace(c schedule.ConvCall) int64 {
	var row [3]int64
	found := false
	if !schedule.IsReduction(c.Which) {
		row, found = lookupShape(c)
	}
	return workspaceOf(c, row, found)
}

// channelsLastWorkspace returns the workspace of a call on a channels-last
// input: the measured one (cudnnTableCL, on the line between two measured
// batches), else what the H200's traces and that sweep show of every such
// call (calibration/README.md §14): a depthwise convolution's forward and
// backward-data passes take none, and a dense convolution's forward and
// backward-data passes take the filter in the call's type (cuDNN reorders
// it to K, R, S, C; backward-data 131 bytes more in float32). A
// backward-filter pass of a shape the sweep lacks follows no rule: it is
// looked up as the NCHW call of the same shape.
func channelsLastWorkspace(c schedule.ConvCall) (int64, bool) {
	if !c.ChannelsLast || schedule.IsReduction(c.Which) {
		return 0, false
	}
	workspaceCLOnce.Do(func() {
		var err error
		if workspacesCL, err = parseWorkspaces(cudnnTableCL); err != nil {
			panic(err) // checked by TestCuDNNTableCL
		}
	})
	if pad, ok := squarePad(c); ok {
		if key, ok := keyOf(c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, max(c.Groups, 1), c.ElemSize, pad); ok {
			row, found := workspacesCL.get(key)
			if !found {
				row, found = workspacesCL.interpolate(key)
			}
			if ws, ok := pick(row, c.Which); found && ok {
				return ws, true
			}
		}
	}
	switch {
	case c.Which == "bwd-filter":
		return 0, false
	case c.Groups > 1 && c.Groups == c.Cin:
		return 0, true
	}
	return c.Cout * c.Cin / max(c.Groups, 1) * c.KH * c.KW * c.ElemSize, true
}

// workspaceOf is CuDNNWorkspace given the table's row of the call's shape,
// when found: a template looks each shape up once for all its calls.
func workspaceOf(c schedule.ConvCall, row [3]int64, found bool) int64 {
	if ws, ok := channelsLastWorkspace(c); ok {
		return ws
	}
	if schedule.IsReduction(c.Which) {
		return schedule.ReductionBytes(c)
	}
	if found {
		if ws, ok := pick(row, c.Which); ok {
			return ws
		}
	}
	return cuDNNWorkspaceRule(c)
}

// cudnnTable is calibration/conv_sweep.py's measurement, as
// calibration/conv_table.go writes it: a list of tab-separated lines
// "N Cin Cout H W K stride groups elemsize fwd bwd-data bwd-filter pad", or
// "N fwd bwd-data bwd-filter" for the shape of the line before, after #
// comments.
//
//go:embed cudnn_h200.tsv
var cudnnTable []byte

// cudnnTableBF16 is the same for the float16 convolutions measured in
// bfloat16 (calibration/conv_sweep.py --bf16).
//
//go:embed cudnn_h200_bf16.tsv
var cudnnTableBF16 []byte

// cudnnTableCL is the same for ConvNeXt's convolutions on channels-last
// inputs (calibration/conv_sweep.py --channels-last: the 112 calls of
// convnext_tiny and convnext_small at 224, batch 1 to 128, float32 and
// float16).
//
//go:embed cudnn_h200_cl.tsv
var cudnnTableCL []byte

// convKey is the shape of a convolution call, as the table keys it: int32
// fields, half the bytes to hash of int64s (the table's numbers are far
// smaller; a call beyond them is not looked up).
type convKey struct{ n, cin, cout, h, w, k, stride, groups, elem, pad int32 }

// keyOf returns the table key of a call's shape, or false when a field
// does not fit an int32.
func keyOf(v ...int64) (convKey, bool) {
	var k [10]int32
	for i, x := range v {
		if x < 0 || x > math.MaxInt32 {
			return convKey{}, false
		}
		k[i] = int32(x)
	}
	return convKey{k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9]}, true
}

// wsTable is the decoded table. Its rows are grouped by their shape but for
// the batch (the key with n = 0): a sweep measures each shape at up to 64
// batches, one after another, so the decode makes one map entry per shape,
// not per row, and a lookup scans the shape's few batches. The rows lie in
// one slice in the table's order; a group holds the runs of it that are its
// rows (most groups one run, a shape that a later sweep measured again or
// at more batches one run per sweep).
type wsTable struct {
	shapes map[convKey]int32 // the shape (n = 0) to its group
	keys   []convKey         // by group: its shape
	maxN   []int32           // by group: its largest batch
	runs   [][]wsRun         // by group: its runs of all, in table order
	small  [][2]uint64       // by group: which batches below 128 it holds
	all    []wsRow
	rows   int // distinct (shape, batch) rows
}

// wsRow is one batch of a shape: the workspaces of its three calls.
type wsRow struct {
	n  int32
	ws [3]int64 // fwd, bwd-data, bwd-filter
}

// wsRun is the rows all[from:to].
type wsRun struct{ from, to int32 }

// get returns the row of a key, if the table has it: the last of its
// rows, as a later line of the table replaces an earlier one.
func (t *wsTable) get(k convKey) ([3]int64, bool) {
	n := k.n
	k.n = 0
	g, ok := t.shapes[k]
	if !ok {
		return [3]int64{}, false
	}
	return t.find(g, n)
}

// find returns the last row of batch n in group g.
func (t *wsTable) find(g, n int32) ([3]int64, bool) {
	runs := t.runs[g]
	for j := len(runs) - 1; j >= 0; j-- {
		for i := runs[j].to - 1; i >= runs[j].from; i-- {
			if t.all[i].n == n {
				return t.all[i].ws, true
			}
		}
	}
	return [3]int64{}, false
}

// groupRows returns group g's distinct rows, each batch's last, in the
// order their batches first appear.
func (t *wsTable) groupRows(g int32) []wsRow {
	var out []wsRow
	seen := map[int32]bool{}
	for _, r := range t.runs[g] {
		for _, row := range t.all[r.from:r.to] {
			if !seen[row.n] {
				seen[row.n] = true
				ws, _ := t.find(g, row.n)
				out = append(out, wsRow{n: row.n, ws: ws})
			}
		}
	}
	return out
}

// set adds a row; a later row of the same key replaces it (get returns the
// last). last is the group of the previous row set, which the next row most
// often shares: it is looked up in the map only when its shape is new.
func (t *wsTable) set(k convKey, ws [3]int64, last *int32) {
	n := k.n
	k.n = 0
	g := *last
	if g < 0 || t.keys[g] != k {
		var ok bool
		if g, ok = t.shapes[k]; !ok {
			g = int32(len(t.keys))
			t.shapes[k] = g
			t.runs = append(t.runs, nil)
			t.small = append(t.small, [2]uint64{})
			t.keys = append(t.keys, k)
			t.maxN = append(t.maxN, -1)
		}
		*last = g
	}
	// Whether the batch is new to the group: a bit for those below 128
	// (all the built-in models' sweeps), else a sweep measures a shape's
	// batches in rising order, so most rows come after every batch their
	// group holds; only the others are looked for.
	switch {
	case n < 128:
		if b := &t.small[g][n/64]; *b&(1<<(n%64)) == 0 {
			*b |= 1 << (n % 64)
			t.rows++
		}
	case n > t.maxN[g]:
		t.rows++
	default:
		if _, dup := t.find(g, n); !dup {
			t.rows++
		}
	}
	t.maxN[g] = max(t.maxN[g], n)
	i := int32(len(t.all))
	t.all = append(t.all, wsRow{n: n, ws: ws})
	runs := t.runs[g]
	if j := len(runs) - 1; j >= 0 && runs[j].to == i {
		runs[j].to++
		return
	}
	t.runs[g] = append(runs, wsRun{i, i + 1})
}

var (
	workspaceOnce, workspaceBF16Once, workspaceCLOnce sync.Once
	workspaces, workspacesBF16, workspacesCL          *wsTable
)

// lookupWorkspace returns the measured workspace of a call, if the table has
// its shape.
func lookupWorkspace(c schedule.ConvCall) (int64, bool) {
	v, ok := lookupShape(c)
	if !ok {
		return 0, false
	}
	return pick(v, c.Which)
}

// pick returns the workspace of call which (fwd, bwd-data or bwd-filter)
// of a table row.
func pick(v [3]int64, which string) (int64, bool) {
	switch which {
	case "fwd":
		return v[0], true
	case "bwd-data":
		return v[1], true
	case "bwd-filter":
		return v[2], true
	}
	return 0, false
}

// squarePad returns the padding of a call that the tables can hold: a
// square kernel, stride and padding, and dilation 1.
func squarePad(c schedule.ConvCall) (int64, bool) {
	if c.KH != c.KW || c.StrideH != c.StrideW || c.PadH != c.PadW || c.DilationH > 1 || c.DilationW > 1 {
		return 0, false
	}
	return c.PadH, true
}

// lookupShape returns the table's row for a call's shape: the measured
// workspaces of its three calls (fwd, bwd-data, bwd-filter), if the table
// has it. The table's convolutions have square kernels, strides and
// paddings and dilation 1: padding k/2 as the built-in models', none as a
// patch embedding's (calibration/patchify_sweep.py), or another, as
// AlexNet's first (conv_configs.go writes the padding of such calls).
func lookupShape(c schedule.ConvCall) ([3]int64, bool) {
	workspaceOnce.Do(func() {
		var err error
		if workspaces, err = parseWorkspaces(cudnnTable); err != nil {
			panic(err) // the embedded tables are checked by TestCuDNNTable
		}
	})
	pad, ok := squarePad(c)
	if !ok {
		return [3]int64{}, false
	}
	key, ok := keyOf(c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, max(c.Groups, 1), c.ElemSize, pad)
	if !ok {
		return [3]int64{}, false
	}
	if c.BF16 {
		// Decoded on a bfloat16 step's first call only.
		workspaceBF16Once.Do(func() {
			var err error
			if workspacesBF16, err = parseWorkspaces(cudnnTableBF16); err != nil {
				panic(err) // checked by TestCuDNNTableBF16
			}
		})
		// bfloat16's own row; else float16's measured row of the same
		// batch, which is bfloat16's at 95%, 97% and 86% of the forward,
		// backward-data and backward-filter calls of the powers of two
		// (missing 2.3%, 0.5% and 4.8% of their bytes), where the line
		// through bfloat16's powers of two misses 8-19%; else the line.
		if v, ok := workspacesBF16.get(key); ok {
			return v, true
		}
		if v, ok := workspaces.get(key); ok {
			return v, true
		}
		if v, ok := workspacesBF16.interpolate(key); ok {
			return v, true
		}
		return workspaces.interpolate(key)
	}
	if v, ok := workspaces.get(key); ok {
		return v, true
	}
	return workspaces.interpolate(key)
}

// interpolate returns the row of a batch that the table lacks from the
// rows of the same shape at the powers of two around it, on the line
// through them: over the 158,202 measured calls of batches between powers
// of two (the built-in models at eight image sizes) the line is within 1
// KiB for 74% of forward, 88% of backward-data and 72% of backward-filter
// calls, and misses by 15.1%, 7.9% and 8.4% of their bytes, where
// cuDNNWorkspaceRule misses by 18–23% (TestCuDNNInterpolation): a shape's
// algorithm mostly stays between two powers of two, and its workspace is
// affine in the batch. It reports false when either row is missing, or the
// batch is a power of two.
func (t *wsTable) interpolate(k convKey) ([3]int64, bool) {
	n := k.n
	if n < 3 || n&(n-1) == 0 {
		return [3]int64{}, false
	}
	lo := int32(1) << (bits.Len32(uint32(n)) - 1)
	k.n = lo
	a, ok := t.get(k)
	if !ok {
		return [3]int64{}, false
	}
	k.n = 2 * lo
	b, ok := t.get(k)
	if !ok {
		return [3]int64{}, false
	}
	var v [3]int64
	for i := range v {
		v[i] = a[i] + (b[i]-a[i])*int64(n-lo)/int64(lo)
	}
	return v, true
}

// parseWorkspaces decodes the embedded table.
func parseWorkspaces(txt []byte) (*wsTable, error) {
	// One row a line: the count is a fast upper bound of the rows.
	t := &wsTable{shapes: make(map[convKey]int32), all: make([]wsRow, 0, bytes.Count(txt, []byte{'\n'})+1)}
	last := int32(-1)
	var prev [13]int64 // the last full line
	for line := 1; len(txt) > 0; line++ {
		var l []byte
		l, txt, _ = bytes.Cut(txt, []byte{'\n'})
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		var v [13]int64
		n, digits := 0, 0
		var cur int64 // the number being read, stored at its end
		for _, c := range l {
			if d := c - '0'; d < 10 {
				cur = 10*cur + int64(d)
				digits++
				continue
			}
			if c != '\t' || digits == 0 || digits > 18 || n == len(v)-1 {
				return nil, fmt.Errorf("onnxmem: cuDNN table line %d: want 13 tab-separated numbers of at most 18 digits", line)
			}
			v[n] = cur
			n, digits, cur = n+1, 0, 0
		}
		if digits > 18 {
			return nil, fmt.Errorf("onnxmem: cuDNN table line %d: want 13 tab-separated numbers of at most 18 digits", line)
		}
		v[n] = cur
		switch {
		case digits == 0 || (n != 3 && n != len(v)-1):
			return nil, fmt.Errorf("onnxmem: cuDNN table line %d: %d fields, want 13, or 4 after a line of 13", line, n+1)
		case n == 3 && last < 0:
			return nil, fmt.Errorf("onnxmem: cuDNN table line %d: 4 fields with no line of 13 before", line)
		case n == 3:
			// N and the workspaces of the line before's shape.
			nb, fwd, bwdData, bwdFilter := v[0], v[1], v[2], v[3]
			v = prev
			v[0], v[9], v[10], v[11] = nb, fwd, bwdData, bwdFilter
		default:
			prev = v
		}
		key, ok := keyOf(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[12])
		if !ok {
			return nil, fmt.Errorf("onnxmem: cuDNN table line %d: a shape beyond the int32 range", line)
		}
		t.set(key, [3]int64{v[9], v[10], v[11]}, &last)
	}
	return t, nil
}

// cuDNNWorkspaceRule approximates the workspace of a call that the measured
// table does not hold, with the algorithms that cuDNN 9.19's heuristics pick
// most often on an H200 for the convolutions of the built-in models and of
// nineteen torchvision networks (calibration/conv_workspace.py and
// conv_sweep.py). IN, OUT and W are the input, output and weight bytes in
// the compute type:
//
//   - The stem, a conv on the 3-channel image: a 3×3 one needs none in
//     float32, and in float16 its backward-filter pass takes 1.25 × OUT; a
//     larger one (ResNet's 7×7, AlexNet's 11×11, a ViT's patches) takes
//     1.25 × OUT in its backward-filter pass, and IN + OUT + W (float32) or
//     1.25 × OUT (float16) in its forward.
//   - Depthwise convs (groups = input channels) need none.
//   - Strided 1×1 convs (ResNet's downsampling) take IN + OUT, but for
//     float32 ones of fewer than 128 input channels, which take none.
//   - Other 1×1 convs need none in the forward and the backward-data pass,
//     nor on a 1×1 map. Their backward-filter pass sums float32 partial
//     weight gradients, one per image: N × W in float32 bytes, worked
//     example: 512 → 1000 channels at batch 32 in float32, 32 × 2,048,000
//     = 62.5 MiB. When that exceeds IN + OUT, float16 calls transpose
//     instead (IN + OUT), and so do float32 ones at batch 128 or from 8 ×
//     IN + OUT on.
//   - k×k convs (k > 1) in float16 take IN + OUT + W in the forward; in
//     float32 the forward takes IN + W, except a stride-1 conv on a large
//     problem (128 or more input channels, or 51200 or more output pixels
//     N·H·W), which takes IN + OUT + W.
//   - The backward-data pass of a k×k conv takes IN + OUT + W.
//   - The backward-filter pass of a float32 k×k conv with at most 64 input
//     channels and at most 25600 output pixels takes 4.5 × OUT (a split-K
//     algorithm that keeps partial weights per block of pixels); other k×k
//     convs take IN + OUT + W.
//
// The measured sizes scatter around these rules, the backward-filter ones
// most (TestCuDNNRule counts how often they hold). Workspaces are transient,
// so they matter only where the peak falls inside a conv call: in the
// backward at small batch sizes, and in the recomputation of a checkpointed
// range, whose last op is often a 1×1 conv. MobileNetV2, whose convolutions
// the table does not hold, comes within 0.6% on the rule alone
// (TestTorchvisionWideModelSteps). Another GPU or cuDNN version may pick
// other algorithms.
func cuDNNWorkspaceRule(c schedule.ConvCall) int64 {
	in := c.N * c.Cin * c.H * c.W * c.ElemSize
	out := c.N * c.Cout * c.OutH * c.OutW * c.ElemSize
	w := c.Cout * (c.Cin / max(c.Groups, 1)) * c.KH * c.KW * c.ElemSize
	half := c.ElemSize == 2
	pixels := c.N * c.OutH * c.OutW
	switch {
	case c.Cin <= 4:
		switch {
		case c.Which == "bwd-filter" && (half || c.KH > 3):
			return out + out/4
		case c.Which == "fwd" && c.KH > 3 && half:
			return out + out/4
		case c.Which == "fwd" && c.KH > 3:
			return in + out + w
		}
		return 0
	case c.Groups > 1 && c.Groups == c.Cin:
		return 0
	case c.KH == 1 && c.KW == 1:
		switch {
		case c.StrideH > 1 || c.StrideW > 1:
			if !half && c.Cin < 128 {
				return 0
			}
			return in + out
		case c.Which != "bwd-filter" || c.OutH*c.OutW == 1:
			return 0
		}
		partial := c.N * w / c.ElemSize * 4
		if half {
			return min(partial, in+out)
		}
		if c.N >= 128 && partial > in+out || partial >= 8*(in+out) {
			return in + out
		}
		return partial
	}
	switch c.Which {
	case "fwd":
		if half || (c.StrideH == 1 && (c.Cin >= 128 || pixels >= 51200)) {
			return in + out + w
		}
		return in + w
	case "bwd-filter":
		if !half && c.Cin <= 64 && pixels <= 25600 {
			return out*4 + out/2
		}
	}
	return in + out + w
}
