// Package cudnn holds the workspaces that cuDNN takes through PyTorch's
// caching allocator for convolution calls, as measured on a card with one
// stack (cuDNN, PyTorch, CUDA), keyed by the card, and the rule that
// approximates the calls no table holds.
//
// Worked example: a 1×1 float16 conv of 384 to 192 channels on a 40×40 map
// takes IN + OUT (the input and output transposed to NHWC) at batch 4 to
// 64 and nothing at batch 1 or 2 on the H200: For("h200").Workspace finds
// the call in the table measured there. At batch 48, which the sweep did
// not measure but for the powers of two around it, it is on the line
// through batch 32's and 64's. A call of another shape gets Rule.
package cudnn

import (
	"bytes"
	_ "embed"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/onnxmem/onnxmem/schedule"
)

// Workspace is the workspace that cuDNN 9 takes through PyTorch's caching
// allocator for one convolution call on the card, with
// torch.backends.cudnn.benchmark off.
//
// cuDNN's heuristics pick an algorithm per call from the shapes, and the
// workspace follows the algorithm: none, IN + OUT (the input and output
// transposed to NHWC for a tensor-core kernel), IN + OUT + W, a multiple of
// the weight (split-K partial sums), and more. The choice is not a formula
// of the shapes: a 1×1 float16 conv of 384 to 192 channels on a 40×40 map
// takes IN + OUT at batch 4 to 64 and nothing at batch 1 or 2, while a 1×1
// conv of 512 to 256 channels on the same map takes at most 272 bytes. So
// Workspace first looks the call up in the card's table (the H200's: with
// cuDNN 9.19 and PyTorch 2.11 (calibration/conv_sweep.py: every convolution
// that the built-in models run at batch 1, 2, 4, ..., 64 on square images of
// 320 to 640 pixels and at every batch from 1 to 64 on 320, 352, 384, 416,
// 448, 512 and 640 (and most of 480), at batch 1 to 32 on square images of
// 672 to 1280 (every 32) and at batch 96 and 128 on 640, in
// float32 and float16, each of the three calls, exact to the byte; the
// torchvision networks' at 224, with their own padding); it is the behaviour of the library, not of
// any model step. A batch that the table lacks between two powers of two it
// holds for the shape gets the line through them (wsTable.interpolate); any
// other call (another model, image size or batch) gets Rule. A reduction (schedule.ColumnSum, ChannelSum) gets its
// staging, schedule.ReductionBytes. A bfloat16 call (ConvCall.BF16) is
// looked up in a second table, the same sweep's float16 convolutions at
// batch 1, 2, 4, ..., 64 measured in bfloat16 (conv_sweep.py --bf16), where
// cuDNN chose another workspace in 5%, 5% and 14% of the forward,
// backward-data and backward-filter calls; a batch that table lacks is
// float16's measured one where the float16 table has it, and a shape it
// lacks is taken as float16's.
func (t *Card) Workspace(c schedule.ConvCall) int64 {
	var row Row
	found := false
	if !schedule.IsReduction(c.Which) {
		row, found = t.Lookup(c)
	}
	return t.WorkspaceOf(c, row, found)
}

// channelsLastWorkspace returns the workspace of a call on a channels-last
// input: the measured one (the card's channels-last table, on the line between two measured
// batches), else what the H200's traces and that sweep show of every such
// call (calibration/README.md §14): a depthwise convolution's forward and
// backward-data passes take none, and a dense convolution's forward and
// backward-data passes take the filter in the call's type (cuDNN reorders
// it to K, R, S, C; backward-data 131 bytes more in float32). A
// backward-filter pass of a shape the sweep lacks follows no rule: it is
// looked up as the NCHW call of the same shape.
func (t *Card) channelsLastWorkspace(c schedule.ConvCall) (int64, bool) {
	if !c.ChannelsLast || schedule.IsReduction(c.Which) {
		return 0, false
	}
	cl := t.cl.table()
	if pad, ok := squarePad(c); ok {
		if key, ok := keyOf(c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, max(c.Groups, 1), c.ElemSize, pad); ok {
			row, found := cl.get(key)
			if !found {
				row, found = cl.interpolate(key)
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

// WorkspaceOf is Workspace given the table's row of the call's shape
// (Lookup), when found: a program template looks each shape up once for
// all its calls.
func (t *Card) WorkspaceOf(c schedule.ConvCall, row Row, found bool) int64 {
	if ws, ok := t.channelsLastWorkspace(c); ok {
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
	return Rule(c)
}

// Row is a table's row of one call shape: the workspaces of its forward,
// backward-data and backward-filter calls.
type Row [3]int64

// Card is the workspaces measured on one card with one stack: a table of
// the float32 and float16 calls (calibration/conv_sweep.py), one of the
// float16 calls measured in bfloat16 (--bf16) and one of channels-last
// calls (--channels-last). Each is decoded on its first use. A Card is
// safe for concurrent use.
type Card struct {
	// Name is the card's ("h200"), Stack the software it was measured with.
	Name, Stack   string
	plain, bf, cl source
}

// source is one embedded table and its decoding, done once.
type source struct {
	txt  []byte
	once sync.Once
	t    *wsTable
}

// table returns the decoded table.
func (s *source) table() *wsTable {
	s.once.Do(func() {
		var err error
		if s.t, err = indexWorkspaces(s.txt); err != nil {
			panic(err) // the embedded tables are checked by TestCuDNNTable and its siblings
		}
	})
	return s.t
}

// h200 is calibration/conv_sweep.py's measurement on an H200, with the
// H100's rows of the shapes the H200 was not swept at (2,299 of 2,312 rows
// both measured are the same to the byte), as calibration/conv_table.go
// writes it: a list of tab-separated lines "N Cin Cout H W K stride groups
// elemsize fwd bwd-data bwd-filter pad", or "N fwd bwd-data bwd-filter" for
// the shape of the line before, after # comments. h200_bf16.tsv is the same
// for the float16 convolutions measured in bfloat16, h200_cl.tsv for
// ConvNeXt's convolutions on channels-last inputs (the 112 calls of
// convnext_tiny and convnext_small at 224, batch 1 to 128, float32 and
// float16).
//
//go:embed h200.tsv
var h200 []byte

//go:embed h200_bf16.tsv
var h200BF16 []byte

//go:embed h200_cl.tsv
var h200CL []byte

// cards are the cards measured, by name.
var cards = []*Card{newCard("h200", "cuDNN 9.19, PyTorch 2.11, CUDA 13.0, sm_90", h200, h200BF16, h200CL)}

// newCard returns a card of tables not yet decoded.
func newCard(name, stack string, plain, bf, cl []byte) *Card {
	return &Card{Name: name, Stack: stack, plain: source{txt: plain}, bf: source{txt: bf}, cl: source{txt: cl}}
}

// For returns the measurements of the named card, or nil when none were
// made on it.
func For(name string) *Card {
	for _, c := range cards {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Decode returns the named card's measurements decoded afresh, as For's
// are on their first use: for benchmarks of that first use.
func Decode(name string) (*Card, error) {
	c := For(name)
	if c == nil {
		return nil, fmt.Errorf("cudnn: no measurements of %q", name)
	}
	fresh := newCard(c.Name, c.Stack, c.plain.txt, c.bf.txt, c.cl.txt)
	var err error
	fresh.plain.once.Do(func() { fresh.plain.t, err = indexWorkspaces(fresh.plain.txt) })
	return fresh, err
}

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

// wsTable is the decoded table, decoded as it is used. Building it reads
// the lines of 13 numbers only (a shape and its first batch: 27,699 of the
// H200 table's 244,498 rows); the short lines after one, its other batches,
// are decoded on the shape's first lookup: a simulation looks up a few
// hundred shapes, and reading every line took longer than the simulation.
//
// Rows are grouped by their shape but for the batch (the key with n = 0):
// a sweep measures each shape at up to 64 batches, one after another, so
// there is one map entry per shape, not per row, and a lookup scans the
// shape's few batches. A group's rows are those of its blocks (a shape
// line and the short lines after it) in table order: most groups have one
// block, a shape that a later sweep measured again one per sweep.
//
// A wsTable is safe for concurrent use: a group decoded twice at once is
// decoded to the same rows.
type wsTable struct {
	txt    []byte
	shapes map[convKey]int32         // the shape (n = 0) to its group
	keys   []convKey                 // by group: its shape
	first  []int32                   // by group: its first block
	last   []int32                   // by group: its last block
	blocks []wsBlock                 // in table order
	rows   []atomic.Pointer[[]wsRow] // by group: its rows, once decoded
}

// wsRow is one batch of a shape: the workspaces of its three calls.
type wsRow struct {
	n  int32
	ws [3]int64 // fwd, bwd-data, bwd-filter
}

// wsBlock is a shape line, decoded, and the short lines after it, not yet:
// txt[from:to], whose first line is line number line of the table. next
// is the next block of its group, or -1.
type wsBlock struct {
	first                wsRow
	from, to, line, next int32
}

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
	rows := t.groupAll(g)
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].n == n {
			return rows[i].ws, true
		}
	}
	return [3]int64{}, false
}

// groupAll returns group g's rows in table order, decoding them on the
// group's first use.
func (t *wsTable) groupAll(g int32) []wsRow {
	if p := t.rows[g].Load(); p != nil {
		return *p
	}
	rows, err := t.decode(g)
	if err != nil {
		panic(err) // the embedded tables are decoded whole by TestCuDNNTable and its siblings
	}
	t.rows[g].Store(&rows)
	return rows
}

// decode reads group g's short lines: its rows, in table order.
func (t *wsTable) decode(g int32) ([]wsRow, error) {
	var rows []wsRow
	for i := t.first[g]; i >= 0; i = t.blocks[i].next {
		b := t.blocks[i]
		rows = append(rows, b.first)
		txt, line := t.txt[b.from:b.to], int(b.line)
		for len(txt) > 0 {
			var l []byte
			l, txt, _ = bytes.Cut(txt, []byte{'\n'})
			line++
			if len(l) == 0 || l[0] == '#' {
				continue
			}
			v, n, err := parseTableLine(l, line)
			if err != nil {
				return nil, err
			}
			if n != 4 {
				return nil, fmt.Errorf("cudnn: table line %d: %d fields after the line of 13 at line %d, want 4", line, n, b.line)
			}
			k, ok := keyOf(v[0])
			if !ok {
				return nil, fmt.Errorf("cudnn: table line %d: a shape beyond the int32 range", line)
			}
			rows = append(rows, wsRow{n: k.n, ws: [3]int64{v[1], v[2], v[3]}})
		}
	}
	return rows, nil
}

// pick returns the workspace of call which (fwd, bwd-data or bwd-filter)
// of a table row.
func pick(v Row, which string) (int64, bool) {
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

// Lookup returns the table's row for a call's shape: the measured
// workspaces of its three calls (fwd, bwd-data, bwd-filter), if the table
// has it. The table's convolutions have square kernels, strides and
// paddings and dilation 1: padding k/2 as the built-in models', none as a
// patch embedding's (calibration/patchify_sweep.py), or another, as
// AlexNet's first (conv_configs.go writes the padding of such calls).
func (t *Card) Lookup(c schedule.ConvCall) (Row, bool) {
	workspaces := t.plain.table()
	pad, ok := squarePad(c)
	if !ok {
		return Row{}, false
	}
	key, ok := keyOf(c.N, c.Cin, c.Cout, c.H, c.W, c.KH, c.StrideH, max(c.Groups, 1), c.ElemSize, pad)
	if !ok {
		return Row{}, false
	}
	if c.BF16 {
		// Decoded on a bfloat16 step's first call only.
		workspacesBF16 := t.bf.table()
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
// Rule misses by 18–23% (TestCuDNNInterpolation): a shape's
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

// indexWorkspaces decodes the lines of 13 numbers of a table, "N Cin Cout
// H W K stride groups elemsize fwd bwd-data bwd-filter pad", and notes
// where the short lines of each, "N fwd bwd-data bwd-filter" for the shape
// of the line of 13 before, lie: it counts their fields but leaves their
// numbers to wsTable.decode.
func indexWorkspaces(txt []byte) (*wsTable, error) {
	if len(txt) > math.MaxInt32 {
		return nil, fmt.Errorf("cudnn: table of %d bytes: at most %d", len(txt), math.MaxInt32)
	}
	// About 220 bytes a shape in the H200's table: a hint, not a bound.
	hint := len(txt) / 200
	t := &wsTable{txt: txt, shapes: make(map[convKey]int32, hint), keys: make([]convKey, 0, hint),
		first: make([]int32, 0, hint), last: make([]int32, 0, hint), blocks: make([]wsBlock, 0, hint)}
	line := 0
	for off := 0; off < len(txt); {
		line++
		end := bytes.IndexByte(txt[off:], '\n')
		if end < 0 {
			end = len(txt)
		} else {
			end += off
		}
		l, start := txt[off:end], off
		off = end + 1
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		if bytes.Count(l, []byte{'\t'}) == 3 {
			if len(t.blocks) == 0 {
				return nil, fmt.Errorf("cudnn: table line %d: 4 fields with no line of 13 before", line)
			}
			continue
		}
		v, n, err := parseTableLine(l, line)
		if err != nil {
			return nil, err
		}
		if n != 13 {
			return nil, fmt.Errorf("cudnn: table line %d: %d fields, want 13, or 4 after a line of 13", line, n)
		}
		key, ok := keyOf(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[12])
		if !ok {
			return nil, fmt.Errorf("cudnn: table line %d: a shape beyond the int32 range", line)
		}
		if len(t.blocks) > 0 {
			t.blocks[len(t.blocks)-1].to = int32(start)
		}
		nb := key.n
		key.n = 0
		i := int32(len(t.blocks))
		t.blocks = append(t.blocks, wsBlock{first: wsRow{n: nb, ws: [3]int64{v[9], v[10], v[11]}},
			from: int32(min(off, len(txt))), to: int32(len(txt)), line: int32(line), next: -1})
		if g, ok := t.shapes[key]; ok {
			t.blocks[t.last[g]].next = i
			t.last[g] = i
			continue
		}
		t.shapes[key] = int32(len(t.keys))
		t.keys = append(t.keys, key)
		t.first = append(t.first, i)
		t.last = append(t.last, i)
	}
	t.rows = make([]atomic.Pointer[[]wsRow], len(t.keys))
	return t, nil
}

// parseTableLine reads the tab-separated numbers of table line number
// line: at most 13 of at most 18 digits each. It returns them and how many
// there are.
func parseTableLine(l []byte, line int) (v [13]int64, fields int, err error) {
	n, digits := 0, 0
	var cur int64 // the number being read, stored at its end
	for _, c := range l {
		if d := c - '0'; d < 10 {
			cur = 10*cur + int64(d)
			digits++
			continue
		}
		if c != '\t' || digits == 0 || digits > 18 || n == len(v)-1 {
			return v, 0, fmt.Errorf("cudnn: table line %d: want 13 tab-separated numbers of at most 18 digits", line)
		}
		v[n] = cur
		n, digits, cur = n+1, 0, 0
	}
	if digits > 18 {
		return v, 0, fmt.Errorf("cudnn: table line %d: want 13 tab-separated numbers of at most 18 digits", line)
	}
	if digits == 0 {
		return v, 0, fmt.Errorf("cudnn: table line %d: %d fields, want 13, or 4 after a line of 13", line, n+1)
	}
	v[n] = cur
	return v, n + 1, nil
}

// Rule approximates the workspace of a call that the measured
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
//   - Depthwise convs (groups = input channels) need none, except in the
//     float16 backward-filter pass of a stride-1 3×3 conv of 32 to 160
//     channels (5×5: 32 to 240), a multiple of 8, on maps of 14 or more
//     and 12,544 or more input pixels N·H·W: those take IN + OUT. Of the
//     measured float16 depthwise backward-filter calls, 7.8% take a
//     workspace (12% of the stride-1 3×3 and 5×5 ones), about IN + OUT.
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
func Rule(c schedule.ConvCall) int64 {
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
		if half && c.Which == "bwd-filter" && c.StrideH == 1 && c.StrideW == 1 && c.KW == c.KH && c.DilationH <= 1 && c.DilationW <= 1 &&
			(c.KH == 3 && c.Cin <= 160 || c.KH == 5 && c.Cin <= 240) && c.Cin >= 32 && c.Cin%8 == 0 && c.H >= 14 && c.N*c.H*c.W >= 12544 {
			return in + out
		}
		return 0
	case c.KH == 1 && c.KW == 1 && c.Cin == 16 && c.Cout == 1 && c.H == 4 && c.Which == "fwd" && c.StrideH == 1 && c.StrideW == 1:
		// The 1×1 convolution of 16 bins to one channel on [N, 16, 4, A]
		// that YOLOv9's DFL runs in eval mode, at anchor counts the sweep
		// lacks (conv_sweep.py --dfl, 5,760 calls in each type): in float16
		// none below batch 15, its input and 16 bytes to batch 60, then
		// 272 bytes, or none where A is odd; in float32 none below batch
		// 7, then its input and a quarter more, and 403.
		switch {
		case half && c.N < 15, !half && c.N < 7:
			return 0
		case !half:
			return in + in/4 + 403
		case c.N <= 60:
			return in + 16
		case c.OutW%2 == 0:
			return 272
		}
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
