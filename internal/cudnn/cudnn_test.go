package cudnn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/schedule"
)

// sweepRows reads calibration/results/conv_sweep.json, patchify_sweep.json
// and dfl/conv_sweep.json, in the table's order: [N, Cin, Cout, H, W, K, stride,
// groups, element size, fwd, bwd-data, bwd-filter, padding] per row.
func sweepRows(t testing.TB) [][13]int64 {
	t.Helper()
	var rows [][13]int64
	for _, f := range []string{"conv_sweep.json", "patchify_sweep.json", "dfl/conv_sweep.json"} {
		b, err := measured.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		var sweep struct {
			Padding *int64    `json:"padding"`
			Rows    [][]int64 `json:"rows"`
		}
		if err := json.Unmarshal(b, &sweep); err != nil {
			t.Fatal(err)
		}
		for _, r := range sweep.Rows {
			switch len(r) {
			case 12:
				pad := r[5] / 2
				if sweep.Padding != nil {
					pad = *sweep.Padding
				}
				rows = append(rows, [13]int64(append(r[:12:12], pad)))
			case 13: // the padding tenth (conv_configs.go where it is not k/2)
				rows = append(rows, [13]int64(append(append(r[:9:9], r[10:]...), r[9])))
			default:
				t.Fatalf("%s: a row of %d numbers, want 12 or 13", f, len(r))
			}
		}
	}
	return rows
}

func callOf(r [13]int64, which string) schedule.ConvCall {
	out := func(x int64) int64 { return (x+2*r[12]-r[5])/r[6] + 1 }
	return schedule.ConvCall{Which: which, N: r[0], Cin: r[1], Cout: r[2], H: r[3], W: r[4], OutH: out(r[3]), OutW: out(r[4]),
		KH: r[5], KW: r[5], StrideH: r[6], StrideW: r[6], PadH: r[12], PadW: r[12], Groups: r[7], ElemSize: r[8]}
}

var passes = []string{"fwd", "bwd-data", "bwd-filter"}

// TestCuDNNTable checks that the embedded table is the measurement in
// calibration/results/conv_sweep.json, row for row (regenerate it with go
// run calibration/conv_table.go), and that CuDNNWorkspace returns it.
func TestCuDNNTable(t *testing.T) {
	rows := sweepRows(t)
	tab, err := parseWorkspaces(h200)
	if err != nil {
		t.Fatal(err)
	}
	if tab.distinct() != len(rows) {
		t.Fatalf("embedded table has %d convolutions, conv_sweep.json %d: run go run calibration/conv_table.go", tab.distinct(), len(rows))
	}
	for _, r := range rows {
		for i, which := range passes {
			c := callOf(r, which)
			if got := h200Card().Workspace(c); got != r[9+i] {
				t.Fatalf("%+v: CuDNNWorkspace %d, measured %d", c, got, r[9+i])
			}
		}
	}
}

// TestCuDNNTableBF16 checks the bfloat16 table against
// calibration/results/conv_sweep_bf16.json (conv_sweep.py --bf16, regenerate
// it with the -in and -o of calibration/conv_table.go's comment): a
// bfloat16 call gets its own measurement, and a float16 call of the same
// shape keeps float16's, which differs in some of them.
func TestCuDNNTableBF16(t *testing.T) {
	differ, n := checkVariantTable(t, "conv_sweep_bf16.json", "bf16", h200BF16, func(c *schedule.ConvCall) { c.BF16 = true })
	if differ == 0 {
		t.Error("no bfloat16 call differs from float16's: the lookup does not tell them apart")
	}
	t.Logf("%d of %d bfloat16 calls take another workspace than float16's", differ, n)
}

// checkVariantTable checks an embedded table of one kind of call (bfloat16,
// channels-last) against its sweep, calibration/results/file, whose env
// sets flag: the same convolutions, and CuDNNWorkspace of each call, marked
// by mark, is the measured one. It returns how many of the calls take
// another workspace unmarked, and how many calls it checked. A sweep's row
// is 12 numbers, or 13 with the padding tenth.
func checkVariantTable(t *testing.T, file, flag string, table []byte, mark func(*schedule.ConvCall)) (differ, calls int) {
	t.Helper()
	b, err := measured.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	var sweep struct {
		Env  map[string]any `json:"env"`
		Rows [][]int64      `json:"rows"`
	}
	if err := json.Unmarshal(b, &sweep); err != nil {
		t.Fatal(err)
	}
	if sweep.Env[flag] != true {
		t.Fatalf("%s: not a sweep with %s", file, flag)
	}
	tab, err := parseWorkspaces(table)
	if err != nil {
		t.Fatal(err)
	}
	if tab.distinct() != len(sweep.Rows) {
		t.Fatalf("embedded table has %d convolutions, %s %d: regenerate it with calibration/conv_table.go (its comment names the flags)", tab.distinct(), file, len(sweep.Rows))
	}
	for _, r := range sweep.Rows {
		var row [13]int64 // N … elemsize, the three workspaces, the padding
		switch len(r) {
		case 12:
			row = [13]int64(append(append([]int64(nil), r...), r[5]/2))
		case 13:
			row = [13]int64(append(append(append([]int64(nil), r[:9]...), r[10:]...), r[9]))
		default:
			t.Fatalf("%s: a row of %d numbers", file, len(r))
		}
		for i, which := range passes {
			c := callOf(row, which)
			plain := h200Card().Workspace(c)
			mark(&c)
			if got := h200Card().Workspace(c); got != row[9+i] {
				t.Fatalf("%+v: CuDNNWorkspace %d, measured %d", c, got, row[9+i])
			}
			if plain != row[9+i] {
				differ++
			}
			calls++
		}
	}
	return differ, calls
}

// TestCuDNNWorkspaceBF16Fallback checks the order of a bfloat16 lookup at
// a batch that the bfloat16 table, measured at the powers of two, lacks:
// float16's measured row of that batch, where the float16 table has it,
// before the line through bfloat16's powers of two.
func TestCuDNNWorkspaceBF16Fallback(t *testing.T) {
	checked := 0
	for _, r := range sweepRows(t) {
		if r[8] != 2 || r[0] != 40 || r[12] != r[5]/2 {
			continue
		}
		for i, which := range passes {
			c := callOf(r, which)
			c.BF16 = true
			if got := h200Card().Workspace(c); got != r[9+i] {
				t.Fatalf("%+v: CuDNNWorkspace %d, float16's measured %d", c, got, r[9+i])
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no float16 call at batch 40 in the sweep")
	}
}

// TestCuDNNWorkspace shows the lookup and the fallback on a few calls.
func TestCuDNNWorkspace(t *testing.T) {
	// The 1×1 conv that ends layer 6 of yolov9-s (384 → 192 channels, 40×40,
	// float16), whose recomputation holds the peak of four segments.
	cv4 := func(n int64, which string) schedule.ConvCall {
		return schedule.ConvCall{Which: which, N: n, Cin: 384, Cout: 192, H: 40, W: 40, OutH: 40, OutW: 40,
			KH: 1, KW: 1, StrideH: 1, StrideW: 1, Groups: 1, ElemSize: 2}
	}
	in, out := func(n int64) int64 { return n * 384 * 1600 * 2 }, func(n int64) int64 { return n * 192 * 1600 * 2 }
	for _, tc := range []struct {
		name string
		c    schedule.ConvCall
		want int64
	}{
		{"measured: none at batch 2", cv4(2, "fwd"), 0},
		{"measured: IN+OUT+147 at batch 32", cv4(32, "fwd"), in(32) + out(32) + 147},
		{"measured: 64 weights in the backward filter at batch 32", cv4(32, "bwd-filter"), 64 * 384 * 192 * 2},
		{"not measured (batch 3): the rule", cv4(3, "fwd"), 0},
		{"not measured (batch 3): the rule's backward filter", cv4(3, "bwd-filter"), 6 * 384 * 192 * 2},
	} {
		if got := h200Card().Workspace(tc.c); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestCuDNNRule measures the fallback rule against the table: the share of
// calls whose workspace it gets within 1 KiB, per pass and precision. The
// rule is what cuDNN picks most often; the floors catch a rule that no
// longer describes the common algorithms.
func TestCuDNNRule(t *testing.T) {
	type cell struct{ hit, n int }
	var cells [2][3]cell
	for _, r := range sweepRows(t) {
		for i, which := range passes {
			c := callOf(r, which)
			d := Rule(c) - r[9+i]
			e := &cells[r[8]/4][i]
			e.n++
			if d >= -1024 && d <= 1024 {
				e.hit++
			}
		}
	}
	// float16, float32. The backward filter's floors are the lowest: its
	// algorithms vary the most (the rule before the partial sums of 1×1
	// convs held for about 20% and 10%; with every batch from 1 to 64 at
	// 320, 384, 416, 512 and 640 swept, 54% and 51%). With 352, 448 and
	// 480 swept as well the float16 forward fell from 85% to 84%. With
	// square images of 672 to 1280 (conv_sweep_big.sh) the float32
	// backward filter fell to 49.8%: the rule was read off 640 and below.
	floors := [2][3]float64{{0.80, 0.85, 0.50}, {0.70, 0.80, 0.48}}
	var b strings.Builder
	for p, name := range []string{"float16", "float32"} {
		for i, which := range passes {
			e := cells[p][i]
			share := float64(e.hit) / float64(e.n)
			fmt.Fprintf(&b, "%-8s %-10s %5d of %5d (%.0f%%)\n", name, which, e.hit, e.n, 100*share)
			if share < floors[p][i] {
				t.Errorf("%s %s: the rule holds for %.0f%% of the measured calls, below %.0f%%", name, which, 100*share, 100*floors[p][i])
			}
		}
	}
	t.Log("calls whose workspace the rule gets within 1 KiB:\n" + b.String())
}

// TestParseWorkspacesErrors checks the table's parser on malformed lines
// and on a table written short.
func TestParseWorkspacesErrors(t *testing.T) {
	txt := func(s string) []byte { return []byte(s) }
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"short line", txt("# header\n1\t2\t3\n"), "line 2: 3 fields"},
		{"letters", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\tx\n"), "line 1: want 13"},
		{"too many", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t14\n"), "line 1: want 13"},
		{"empty field", txt("1\t\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\n"), "line 1: want 13"},
		{"short form first", txt("# header\n2\t10\t11\t12\n"), "line 2: 4 fields with no line of 13 before"},
		{"19 digits", txt("1234567890123456789\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n"), "line 1: want 13"},
		{"19 digits last", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t1234567890123456789\n"), "line 1: want 13"},
		{"19 digits short", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n2\t1234567890123456789\t1\t1\n"), "line 2: want 13"},
		{"trailing tab", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\t\n"), "line 1: want 13"},
		{"short trailing tab", txt("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n2\t1\t1\t\n"), "line 2: 4 fields"},
	} {
		_, err := parseWorkspaces(tc.in)
		if err == nil || !strings.HasPrefix(err.Error(), "cudnn: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
	// The second row is written short, as conv_table.go writes a shape's
	// next batch; batches 4, 3 and 4 again come after it, out of order.
	m, err := parseWorkspaces(txt("# c\n\n1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n2\t13\t14\t15\n" +
		"1\t2\t3\t4\t5\t6\t7\t8\t9\t16\t17\t18\t0\n4\t1\t1\t1\n3\t2\t2\t2\n4\t3\t3\t3\n"))
	key := func(n int64) convKey { k, _ := keyOf(n, 2, 3, 4, 5, 6, 7, 8, 9, 0); return k }
	v1, ok1 := m.get(key(1))
	v2, ok2 := m.get(key(2))
	v3, ok3 := m.get(key(3))
	v4, ok4 := m.get(key(4))
	_, ok5 := m.get(key(5))
	// The later row of a key wins, as it did when the table was one map.
	if err != nil || m.distinct() != 4 || !ok1 || v1 != [3]int64{16, 17, 18} || !ok2 || v2 != [3]int64{13, 14, 15} ||
		!ok3 || v3 != [3]int64{2, 2, 2} || !ok4 || v4 != [3]int64{3, 3, 3} || ok5 {
		t.Errorf("parse: %+v, %v", m, err)
	}
	// Batches from 128 on are told apart by a search, not the bitmap: 200,
	// 150 and 200 again are two rows, the later 200 winning.
	m, err = parseWorkspaces(txt("200\t2\t3\t4\t5\t6\t7\t8\t9\t1\t1\t1\t0\n150\t2\t2\t2\n200\t3\t3\t3\n"))
	v200, ok200 := m.get(key(200))
	v150, ok150 := m.get(key(150))
	if err != nil || m.distinct() != 2 || !ok200 || v200 != [3]int64{3, 3, 3} || !ok150 || v150 != [3]int64{2, 2, 2} {
		t.Errorf("parse of batches past 127: %+v, %v", m, err)
	}
}

// BenchmarkCuDNNTable indexes the embedded table, which the first
// simulation in a process does once. Goal: under 20 ms.
func BenchmarkCuDNNTable(b *testing.B) {
	for b.Loop() {
		if _, err := indexWorkspaces(h200); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCuDNNWorkspacePadding checks that a call is looked up with its own
// padding and dilation: the table's sizes are for its shapes only.
func TestCuDNNWorkspacePadding(t *testing.T) {
	c := schedule.ConvCall{Which: "fwd", N: 32, Cin: 384, Cout: 192, H: 40, W: 40, OutH: 40, OutW: 40,
		KH: 1, KW: 1, StrideH: 1, StrideW: 1, Groups: 1, ElemSize: 2}
	if _, ok := h200Card().lookupWorkspace(c); !ok {
		t.Fatalf("%+v: not in the table", c)
	}
	for _, mod := range []func(*schedule.ConvCall){
		func(c *schedule.ConvCall) { c.OutH, c.OutW, c.PadH, c.PadW = 42, 42, 1, 1 },
		func(c *schedule.ConvCall) { c.OutH, c.PadH = 42, 1 },
		func(c *schedule.ConvCall) { c.DilationH, c.DilationW = 2, 2 },
	} {
		d := c
		mod(&d)
		if _, ok := h200Card().lookupWorkspace(d); ok {
			t.Errorf("%+v: looked up as %+v", d, c)
		}
	}
}

// FuzzParseWorkspaces feeds the cuDNN table's parser arbitrary text: it
// returns an error or a table, never panics, and a table holds at most one
// row a line.
func FuzzParseWorkspaces(f *testing.F) {
	f.Add([]byte("# c\n1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n2\t13\t14\t15\n"))
	f.Add([]byte("2\t13\t14\t15\n"))
	f.Add([]byte("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := parseWorkspaces(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cudnn: table") {
				t.Fatalf("error %q: want the package and the table named", err)
			}
			return
		}
		if lines := bytes.Count(b, []byte{'\n'}) + 1; tab.distinct() > lines {
			t.Fatalf("%d rows from %d lines", tab.distinct(), lines)
		}
		// The table decoded whole, and decoded as it is looked up, hold
		// the rows of a plain reading of the lines, the later row of a key
		// winning.
		lazy, err := indexWorkspaces(b)
		if err != nil {
			t.Fatalf("decoded whole, but not indexed: %v", err)
		}
		want := plainWorkspaces(b)
		if tab.distinct() != len(want) {
			t.Fatalf("%d rows, a plain reading %d", tab.distinct(), len(want))
		}
		for k, v := range want {
			if got, ok := lazy.get(k); !ok || got != v {
				t.Fatalf("%+v: indexed %v %v, a plain reading %v", k, got, ok, v)
			}
			if got, ok := tab.get(k); !ok || got != v {
				t.Fatalf("%+v: decoded %v %v, a plain reading %v", k, got, ok, v)
			}
		}
	})
}

// plainWorkspaces reads a table that parseWorkspaces accepted line by
// line, with strconv, into a map from each key to its last row: the
// oracle of FuzzParseWorkspaces.
func plainWorkspaces(b []byte) map[convKey][3]int64 {
	out := map[convKey][3]int64{}
	var shape []int64
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		var v []int64
		for _, f := range strings.Split(l, "\t") {
			x, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				panic(err)
			}
			v = append(v, x)
		}
		if len(v) == 4 {
			v = append(append(append([]int64{v[0]}, shape[1:9]...), v[1:]...), shape[12])
		}
		shape = v
		k, _ := keyOf(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[12])
		out[k] = [3]int64{v[9], v[10], v[11]}
	}
	return out
}

// TestCuDNNInterpolation measures the line through the powers of two (the
// fallback for a batch the table lacks between two it holds) against every
// measured call of such a batch, beside the rule: the share within 1 KiB
// and the bytes missed, as a share of the calls' bytes. The line must miss
// fewer bytes than the rule in every pass.
func TestCuDNNInterpolation(t *testing.T) {
	tab, err := parseWorkspaces(h200)
	if err != nil {
		t.Fatal(err)
	}
	var hit, ruleHit, n [3]int
	var miss, ruleMiss, total [3]float64
	abs := func(x int64) float64 { return math.Abs(float64(x)) }
	for g, k := range tab.keys {
		for _, r := range tab.groupRows(int32(g)) {
			k.n = r.n
			v, ok := tab.interpolate(k)
			if !ok {
				continue
			}
			out := func(x int64) int64 {
				return (x+2*int64(k.pad)-int64(k.k))/max(int64(k.stride), 1) + 1
			}
			for i, which := range passes {
				c := schedule.ConvCall{Which: which, N: int64(k.n), Cin: int64(k.cin), Cout: int64(k.cout), H: int64(k.h), W: int64(k.w),
					OutH: out(int64(k.h)), OutW: out(int64(k.w)), KH: int64(k.k), KW: int64(k.k), StrideH: int64(k.stride), StrideW: int64(k.stride),
					PadH: int64(k.pad), PadW: int64(k.pad), Groups: int64(k.groups), ElemSize: int64(k.elem)}
				d, dr := v[i]-r.ws[i], Rule(c)-r.ws[i]
				n[i]++
				total[i] += float64(r.ws[i])
				miss[i] += abs(d)
				ruleMiss[i] += abs(dr)
				if abs(d) <= 1024 {
					hit[i]++
				}
				if abs(dr) <= 1024 {
					ruleHit[i]++
				}
			}
		}
	}
	var b strings.Builder
	for i, which := range passes {
		if n[i] < 150000 {
			t.Fatalf("%s: %d calls between powers of two, want the sweep's 158,202", which, n[i])
		}
		fmt.Fprintf(&b, "%-10s %5d calls: line within 1 KiB %3.0f%%, misses %4.1f%% of the bytes; rule %3.0f%%, %4.1f%%\n", which, n[i],
			100*float64(hit[i])/float64(n[i]), 100*miss[i]/total[i], 100*float64(ruleHit[i])/float64(n[i]), 100*ruleMiss[i]/total[i])
		if miss[i] >= ruleMiss[i] {
			t.Errorf("%s: the line misses %.1f%% of the bytes, the rule %.1f%%", which, 100*miss[i]/total[i], 100*ruleMiss[i]/total[i])
		}
	}
	t.Log("\n" + b.String())
}

// TestCuDNNTableCL checks that the embedded channels-last table is the
// measurement in calibration/results/cl/conv_sweep.json (conv_sweep.py
// --channels-last), row for row, that CuDNNWorkspace returns it for
// channels-last calls, and that it differs from the NCHW call's where
// ConvNeXt's traces showed it does: the depthwise backward-filter passes.
func TestCuDNNTableCL(t *testing.T) {
	differ, n := checkVariantTable(t, "cl/conv_sweep.json", "channels_last", h200CL, func(c *schedule.ConvCall) { c.ChannelsLast = true })
	if differ == 0 {
		t.Error("no channels-last call differs from its NCHW one: the lookup does not tell them apart")
	}
	t.Logf("%d of %d channels-last calls take another workspace than NCHW's", differ, n)
}

// h200Card returns the H200's measurements.
func h200Card() *Card { return For("h200") }

// groupRows returns group g's distinct rows, each batch's last, in the
// order their batches first appear.
func (t *wsTable) groupRows(g int32) []wsRow {
	var out []wsRow
	seen := map[int32]bool{}
	for _, row := range t.groupAll(g) {
		if !seen[row.n] {
			seen[row.n] = true
			ws, _ := t.find(g, row.n)
			out = append(out, wsRow{n: row.n, ws: ws})
		}
	}
	return out
}

// distinct returns how many distinct (shape, batch) rows the table holds.
func (t *wsTable) distinct() int {
	n := 0
	for g := range t.keys {
		n += len(t.groupRows(int32(g)))
	}
	return n
}

// lookupWorkspace returns the measured workspace of a call, if the table has
// its shape.
func (t *Card) lookupWorkspace(c schedule.ConvCall) (int64, bool) {
	v, ok := t.Lookup(c)
	if !ok {
		return 0, false
	}
	return pick(v, c.Which)
}

// parseWorkspaces decodes a table whole, every line checked: what the
// tests and the fuzz target read. A simulation reads the embedded tables
// through indexWorkspaces, which decodes a shape's short lines on its first
// lookup.
func parseWorkspaces(txt []byte) (*wsTable, error) {
	t, err := indexWorkspaces(txt)
	if err != nil {
		return nil, err
	}
	for g := range t.keys {
		rows, err := t.decode(int32(g))
		if err != nil {
			return nil, err
		}
		t.rows[g].Store(&rows)
	}
	return t, nil
}
