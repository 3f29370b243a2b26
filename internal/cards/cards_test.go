package cards

import (
	"math"
	"testing"
)

// FuzzParse reads device names and sizes: an error, or a device
// whose total is positive and larger than its context; and a size that
// ParseBytes reads, written back by FormatBytes, reads within the two
// decimals FormatBytes keeps.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"h200", "24GB", "23.5GiB", "24GB+ctx=600MiB", "1e3TB", "0.5KiB+ctx=0B", "-3GB", "NaNGB", "24GB+600MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := Parse(s); err == nil {
			if d.Total <= 0 || d.Context < 0 || d.Context >= d.Total || d.Usable() <= 0 {
				t.Fatalf("%q: total %d, context %d, usable %d", s, d.Total, d.Context, d.Usable())
			}
		}
		n, err := ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("%q: %d bytes", s, n)
		}
		back, err := ParseBytes(FormatBytes(n))
		if err != nil {
			t.Fatalf("%q: %d bytes written %q, which does not read: %v", s, n, FormatBytes(n), err)
		}
		if d := math.Abs(float64(back - n)); d > 0.005*float64(n)+0.5 {
			t.Fatalf("%q: %d bytes written %q read back as %d", s, n, FormatBytes(n), back)
		}
	})
}

// TestParseBytes reads sizes in each unit family: binary, decimal, and the
// bare decimal letters of training logs ("24G" is 24·10⁹ bytes, as
// GPU_mem's G is).
func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"24GB", 24e9}, {"24G", 24e9}, {"24g", 24e9}, {"23.5GiB", 23.5 * (1 << 30)}, {"600MiB", 600 << 20}, {"600M", 600e6}, {"1T", 1e12}, {"512B", 512}} {
		if got, err := ParseBytes(c.in); err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if d, err := Parse("24G"); err != nil || d.Total != 24e9 {
		t.Errorf("Parse(24G) = %+v, %v; want a 24e9-byte card", d, err)
	}
}
