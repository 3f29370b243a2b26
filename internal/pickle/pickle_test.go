package pickle

import (
	"bytes"
	"math"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWrite checks the bytes of small pickles against what CPython's
// pickle.dumps(v, protocol=2) gives for the same values (written out from
// Lib/pickletools.py's opcodes; Python's output for these is identical but
// for its memo opcodes, which a loader does not need).
func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want []byte
	}{
		{nil, []byte("\x80\x02N.")},
		{true, []byte("\x80\x02\x88.")},
		{1, []byte("\x80\x02J\x01\x00\x00\x00.")},
		{int64(1) << 40, []byte("\x80\x02\x8a\x06\x00\x00\x00\x00\x00\x01.")},
		{int64(-1) << 40, []byte("\x80\x02\x8a\x06\x00\x00\x00\x00\x00\xff.")},
		{int64(math.MaxInt64), []byte("\x80\x02\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f.")},
		{int64(1) << 31, []byte("\x80\x02\x8a\x05\x00\x00\x00\x80\x00.")},
		{"ab", []byte("\x80\x02X\x02\x00\x00\x00ab.")},
		{List{}, []byte("\x80\x02].")},
		{Dict{{"a", 1}, {"b", List{"x", true}}}, []byte("\x80\x02}(X\x01\x00\x00\x00aJ\x01\x00\x00\x00X\x01\x00\x00\x00b](X\x01\x00\x00\x00x\x88eu.")},
		{Tuple{0, 0}, []byte("\x80\x02(J\x00\x00\x00\x00J\x00\x00\x00\x00t.")},
	} {
		var b bytes.Buffer
		if err := Write(&b, tc.v); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), tc.want) {
			t.Errorf("%#v: % x, want % x", tc.v, b.Bytes(), tc.want)
		}
	}
	if err := Write(&bytes.Buffer{}, struct{}{}); err == nil {
		t.Error("a struct was written")
	}
}

// TestRead reads a pickle that CPython 3.11 wrote (pickle.dumps(d,
// protocol=4) of a snapshot-like dict: FRAME, MEMOIZE, SHORT_BINUNICODE,
// LONG1, TUPLE2, BINFLOAT and the rest), and what Write writes.
func TestRead(t *testing.T) {
	f, err := os.Open("testdata/snapshot-p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	want := Dict{
		{"segments", List{Dict{{"address", int64(1) << 45}, {"total_size", int64(20971520)},
			{"blocks", List{Dict{{"size", int64(512)}, {"state", "active_allocated"}, {"frames", List{Dict{{"filename", "a.py"}, {"line", int64(3)}, {"name", "f"}}}}}}}}}},
		{"device_traces", List{List{
			Dict{{"action", "alloc"}, {"addr", int64(-5)}, {"size", int64(1) << 40}, {"frames", List{}}},
			Dict{{"action", "free_completed"}, {"addr", int64(7)}, {"size", int64(512)}, {"frames", List{}}, {"t", Tuple{int64(1), int64(2)}}, {"x", 1.5}, {"n", nil}, {"b", true}},
		}}},
	}
	if d := cmp.Diff(want, v); d != "" {
		t.Errorf("read (-want +got):\n%s", d)
	}
	var b bytes.Buffer
	if err := Write(&b, want); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&b)
	if err != nil || !cmp.Equal(back, want) {
		t.Errorf("Write then Read: %v, %v", err, cmp.Diff(want, back))
	}
}

// FuzzRead feeds bytes to Read: a value or an error, never a panic.
func FuzzRead(f *testing.F) {
	seed, err := os.ReadFile("testdata/snapshot-p4.pickle")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("\x80\x02}(X\x01\x00\x00\x00aJ\x01\x00\x00\x00u."))
	f.Fuzz(func(t *testing.T, data []byte) {
		Read(bytes.NewReader(data))
	})
}
