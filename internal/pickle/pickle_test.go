package pickle

import (
	"bytes"
	"math"
	"testing"
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
