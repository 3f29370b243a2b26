package allocator

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Config holds the options of PYTORCH_CUDA_ALLOC_CONF that change how the
// caching allocator accounts device memory. The zero value is PyTorch's
// default: no option set. ParseConf reads the environment variable's syntax.
type Config struct {
	// MaxSplitSize is max_split_size_mb in bytes; 0 means unlimited, the
	// default. Blocks of at least this size are never split, a request below
	// it never takes one, and out of memory releases such blocks first.
	MaxSplitSize int64
	// MaxNonSplitRounding is max_non_split_rounding_mb in bytes; 0 means the
	// default, the large segment size: a request of at least MaxSplitSize
	// takes a cached block only when the block is less than this much larger.
	MaxNonSplitRounding int64
	// LargeSegmentSize is large_segment_size_mb in bytes; 0 means the
	// default, 20 MiB (kLargeBuffer): the segment reserved for a request
	// between 1 and 10 MiB, and the page of a large-pool expandable segment.
	LargeSegmentSize int64
	// ExpandableSegments is expandable_segments:True: one segment per pool
	// that grows by mapping pages (2 MiB in the small pool, the large segment
	// size in the large pool) and shrinks by unmapping wholly free pages.
	ExpandableSegments bool
	// RoundupPower2Divisions is roundup_power2_divisions: for sizes in
	// [2^(20+i), 2^(21+i)) bytes (index 0 also below 1 MiB, index 15 also
	// from 32 GiB), the number of equal steps between two powers of two that
	// a request is rounded up to; 0 or 1 means 512-byte rounding.
	RoundupPower2Divisions [16]uint64
	// GarbageCollectionThreshold is garbage_collection_threshold, in (0, 1);
	// 0 means off. It acts only under a Capacity (PyTorch: under
	// set_per_process_memory_fraction): before reserving a new segment, once
	// reserved bytes exceed this fraction of the capacity, wholly free large
	// segments that waited the longest are released.
	GarbageCollectionThreshold float64
	// PerProcessMemoryFraction is per_process_memory_fraction, in (0, 1); 0
	// means none (1, the default). PyTorch limits the allocator to
	// int64(f × total device memory) from the start; the simulation knows no
	// device, so it is the caller's to turn it into Capacity with CapacityFor.
	PerProcessMemoryFraction float64
}

// CapacityFor returns the Capacity that PerProcessMemoryFraction gives on a
// device of total bytes (cudaDeviceProp::totalGlobalMem), PyTorch's
// allowed_memory_maximum, or 0 (no limit) without a fraction.
func (c Config) CapacityFor(total int64) int64 {
	if c.PerProcessMemoryFraction <= 0 || c.PerProcessMemoryFraction >= 1 {
		return 0
	}
	// At least 1: a limit of 0 bytes admits no segment, as 1 byte does.
	return max(int64(c.PerProcessMemoryFraction*float64(total)), 1)
}

// Limits from c10/cuda/CUDAAllocatorConfig.h and c10/core/AllocatorConfig.cpp.
const (
	maxPinnedRegisterThreads = 128 // pinned_num_register_threads: a power of 2 up to this
	roundupIntervals         = 16  // roundup_power2_divisions: 1 MiB .. 64 GiB
)

// ParseConf parses a PYTORCH_CUDA_ALLOC_CONF string as PyTorch 2.11 does, and
// fails where PyTorch raises. The string is cut into tokens at ',', ':', '['
// and ']', white space dropped (ConfigTokenizer, c10/core/AllocatorConfig.h),
// and read as key, separator, value, separator, ...; PyTorch only checks that
// a separator token exists, not which one it is (checkToken's result is
// ignored), so "max_split_size_mb,64" reads as "max_split_size_mb:64", and a
// trailing separator is allowed. Three passes read the same tokens, as
// setAllocatorSettings does: AcceleratorAllocatorConfig::parseArgs reads
// large_segment_size_mb first, then its own keys (skipping the CUDA ones with
// skipKey), then CUDAAllocatorConfig::parseArgs reads the CUDA keys (skipping
// the others); the string is accepted when all three accept it. Numbers are
// read as std::stoull and std::stod read them: an optional sign and the
// longest numeric prefix, the rest of the token ignored ("64MB" is 64, "-1"
// wraps to 2^64-1). A later key overrides an earlier one. The empty string
// is the default Config.
//
// Options that change device memory are kept in the Config:
// max_split_size_mb (at least large_segment_size_mb, 20 by default),
// max_non_split_rounding_mb (likewise), large_segment_size_mb (above 10),
// expandable_segments (True or False), roundup_power2_divisions (a power of 2,
// or the list form [256:1,512:2,>:4] of power-of-2 MiB boundaries and powers
// of 2 or 0), garbage_collection_threshold (strictly between 0 and 1),
// per_process_memory_fraction (in (0, 1]; see CapacityFor).
//
// Options that change no device-memory accounting are checked as PyTorch
// checks them and otherwise ignored: backend:native,
// release_lock_on_cudamalloc (whether the lock is held during cudaMalloc, not
// what it reserves), pinned_use_cuda_host_register,
// pinned_num_register_threads, pinned_use_background_threads and
// pinned_reserve_segment_size_mb (pinned host memory),
// graph_capture_record_stream_reuse (CUDA graph capture only), and the hip
// spellings.
//
// Errors: backend:cudaMallocAsync (CUDA's own allocator, not simulated),
// per_process_memory_fraction:0 (allows no memory at all; PyTorch accepts
// it), large_segment_size_mb beyond 2^43 MiB, and whatever PyTorch rejects:
// unknown keys, missing values, values out of range.
func ParseConf(s string) (Config, error) {
	t := tokenize(s)
	c := Config{LargeSegmentSize: LargeBuffer}
	// AcceleratorAllocatorConfig::parseArgs, first loop: every token
	// large_segment_size_mb, wherever it stands.
	for i := 0; i < len(t); i++ {
		if t[i] == "large_segment_size_mb" {
			var err error
			if i, c.LargeSegmentSize, err = t.largeSegment(i); err != nil {
				return Config{}, err
			}
		}
	}
	c.MaxNonSplitRounding = c.LargeSegmentSize
	// The second loop: the device-generic keys.
	for i := 0; i < len(t); i++ {
		key := t[i]
		var err error
		switch key {
		case "large_segment_size_mb":
			i, err = t.skipKey(i)
		case "max_split_size_mb":
			i, c.MaxSplitSize, err = t.megabytes(i, key, c.LargeSegmentSize)
		case "max_non_split_rounding_mb":
			i, c.MaxNonSplitRounding, err = t.megabytes(i, key, c.LargeSegmentSize)
		case "garbage_collection_threshold":
			i, c.GarbageCollectionThreshold, err = t.threshold(i)
		case "roundup_power2_divisions":
			i, err = t.divisions(i, &c.RoundupPower2Divisions)
		case "expandable_segments":
			i, c.ExpandableSegments, err = t.boolean(i, key)
		case "pinned_use_background_threads":
			i, _, err = t.boolean(i, key)
		default:
			if !cudaKeys[key] {
				return Config{}, unknownKey(key)
			}
			i, err = t.skipKey(i)
		}
		if err != nil {
			return Config{}, err
		}
		i++ // the separator: PyTorch checks that it exists, not what it is
	}
	// CUDAAllocatorConfig::parseArgs: the CUDA keys.
	for i := 0; i < len(t); i++ {
		key := t[i]
		var err error
		switch key {
		case "backend":
			i, err = t.backend(i)
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
			"pinned_use_cuda_host_register", "pinned_use_hip_host_register",
			"graph_capture_record_stream_reuse":
			i, _, err = t.boolean(i, key)
		case "pinned_num_register_threads":
			i, err = t.registerThreads(i)
		case "pinned_reserve_segment_size_mb":
			i, err = t.positive(i, key)
		case "per_process_memory_fraction":
			i, c.PerProcessMemoryFraction, err = t.fraction(i)
		default:
			if !genericKeys[key] {
				return Config{}, unknownKey(key)
			}
			i, err = t.skipKey(i)
		}
		if err != nil {
			return Config{}, err
		}
		i++
	}
	if c.MaxNonSplitRounding == c.LargeSegmentSize {
		c.MaxNonSplitRounding = 0
	}
	if c.LargeSegmentSize == LargeBuffer {
		c.LargeSegmentSize = 0
	}
	if c.PerProcessMemoryFraction == 1 {
		c.PerProcessMemoryFraction = 0
	}
	return c, nil
}

// The keys of AcceleratorAllocatorConfig::getKeys (the device-generic ones)
// and of CUDAAllocatorConfig::getKeys.
var (
	genericKeys = map[string]bool{"large_segment_size_mb": true, "max_split_size_mb": true,
		"max_non_split_rounding_mb": true, "garbage_collection_threshold": true,
		"roundup_power2_divisions": true, "expandable_segments": true, "pinned_use_background_threads": true}
	cudaKeys = map[string]bool{"backend": true, "release_lock_on_cudamalloc": true,
		"pinned_use_cuda_host_register": true, "release_lock_on_hipmalloc": true,
		"pinned_use_hip_host_register": true, "graph_capture_record_stream_reuse": true,
		"pinned_reserve_segment_size_mb": true, "pinned_num_register_threads": true,
		"per_process_memory_fraction": true}
)

func unknownKey(key string) error {
	return fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: unknown key %q; PyTorch 2.11 knows max_split_size_mb, max_non_split_rounding_mb, large_segment_size_mb, expandable_segments, roundup_power2_divisions, garbage_collection_threshold, per_process_memory_fraction, backend, release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_num_register_threads, pinned_use_background_threads, pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse", key)
}

// tokens is PyTorch's ConfigTokenizer: ',', ':', '[' and ']' are tokens of
// their own, white space (std::isspace) is dropped, the rest are words.
type tokens []string

func tokenize(s string) tokens {
	var t tokens
	var word []byte
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case ',', ':', '[', ']':
			if len(word) > 0 {
				t = append(t, string(word))
				word = word[:0]
			}
			t = append(t, string(ch))
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			word = append(word, ch)
		}
	}
	if len(word) > 0 {
		t = append(t, string(word))
	}
	return t
}

// at returns token i, or an error naming key when the string ends first
// (ConfigTokenizer::checkIndex).
func (t tokens) at(i int, key, want string) (string, error) {
	if i >= len(t) {
		return "", fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: the string ends where %s is expected", key, want)
	}
	return t[i], nil
}

// value returns the index and token of the value of the key at i: the
// token after the separator.
func (t tokens) value(i int, key, want string) (int, string, error) {
	if _, err := t.at(i+1, key, "':' and "+want); err != nil {
		return i, "", err
	}
	tok, err := t.at(i+2, key, want)
	return i + 2, tok, err
}

// skipKey is ConfigTokenizer::skipKey: past the separator and the value, a
// single token or a list up to the first ']'.
func (t tokens) skipKey(i int) (int, error) {
	key := t[i]
	i, tok, err := t.value(i, key, "a value")
	if err != nil || tok != "[" {
		return i, err
	}
	for i++; i < len(t) && t[i] != "]"; i++ {
	}
	if i >= len(t) {
		return i, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: the list has no closing ']'", key)
	}
	return i, nil
}

// uintValue reads token tok as std::stoull does.
func uintValue(tok, key, want string) (uint64, error) {
	v, ok := stoull(tok)
	if !ok {
		return 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want %s, got %q", key, want, tok)
	}
	return v, nil
}

// stoull is std::stoull(s) in base 10: an optional sign, then the longest
// run of digits, which must not be empty; a minus sign negates modulo 2^64;
// a value beyond 2^64-1 is an error (std::out_of_range).
func stoull(s string) (uint64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(s[:n], 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// stod is std::stod(s): the longest prefix that strtod reads (decimal or
// hexadecimal floating point, inf, infinity, nan, with an optional sign); no
// prefix, or a finite value out of double's range, is an error.
func stod(s string) (float64, bool) {
	lower := strings.ToLower(s)
	sign := ""
	if len(lower) > 0 && (lower[0] == '+' || lower[0] == '-') {
		sign, lower = lower[:1], lower[1:]
	}
	if strings.HasPrefix(lower, "nan") {
		return math.NaN(), true
	}
	if strings.HasPrefix(lower, "inf") {
		return math.Inf(1 - 2*strings.Count(sign, "-")), true
	}
	digits := func(s string, i int, hex bool) int {
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || hex && (s[i] >= 'a' && s[i] <= 'f')) {
			i++
		}
		return i
	}
	hex := strings.HasPrefix(lower, "0x")
	start := 0
	if hex {
		start = 2
	}
	i := digits(lower, start, hex)
	mant := i - start
	if i < len(lower) && lower[i] == '.' {
		j := digits(lower, i+1, hex)
		mant += j - i - 1
		i = j
	}
	if mant == 0 {
		if hex { // "0x" alone: strtod reads the "0"
			return 0, true
		}
		return 0, false
	}
	end := i
	exp := byte('e')
	if hex {
		exp = 'p'
	}
	if i < len(lower) && lower[i] == exp {
		j := i + 1
		if j < len(lower) && (lower[j] == '+' || lower[j] == '-') {
			j++
		}
		if k := digits(lower, j, false); k > j {
			end = k
		}
	}
	num := lower[:end]
	if hex && !strings.Contains(num, "p") {
		num += "p0"
	}
	v, err := strconv.ParseFloat(sign+num, 64)
	if err != nil || v != 0 && math.Abs(v) < 0x1p-1022 {
		return 0, false // ERANGE, overflow or underflow: std::out_of_range
	}
	return v, true
}

// largeSegment reads large_segment_size_mb: above 10 (kMinLargeAlloc in
// MiB), in bytes.
func (t tokens) largeSegment(i int) (int, int64, error) {
	const key = "large_segment_size_mb"
	i, tok, err := t.value(i, key, "a whole number of MiB above 10")
	if err != nil {
		return i, 0, err
	}
	v, err := uintValue(tok, key, "a whole number of MiB above 10")
	if err != nil {
		return i, 0, err
	}
	if v <= MinLargeAlloc>>20 {
		return i, 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want more than %d (MiB), got %d", key, MinLargeAlloc>>20, v)
	}
	if v > math.MaxInt64>>20 {
		return i, 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: %d MiB is beyond what is simulated (2^43 MiB)", key, v)
	}
	return i, int64(v) << 20, nil
}

// megabytes reads max_split_size_mb or max_non_split_rounding_mb: at least
// the large segment size in MiB, in bytes; a value beyond what int64 bytes
// hold is unlimited (0), which behaves as PyTorch's clamp to SIZE_MAX/1 MiB
// MiB does: no block is ever that large.
func (t tokens) megabytes(i int, key string, least int64) (int, int64, error) {
	want := fmt.Sprintf("a whole number of MiB, at least %d", least>>20)
	i, tok, err := t.value(i, key, want)
	if err != nil {
		return i, 0, err
	}
	v, err := uintValue(tok, key, want)
	if err != nil {
		return i, 0, err
	}
	if v < uint64(least>>20) {
		return i, 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want at least %d (MiB, the large segment size), got %d", key, least>>20, v)
	}
	if v > math.MaxInt64>>20 {
		if key == "max_split_size_mb" {
			return i, 0, nil
		}
		// PyTorch adds it to the request in size_t, which wraps.
		return i, 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: %d MiB is beyond what is simulated (2^43 MiB)", key, v)
	}
	return i, int64(v) << 20, nil
}

// threshold reads garbage_collection_threshold's value.
func (t tokens) threshold(i int) (int, float64, error) {
	const key = "garbage_collection_threshold"
	i, tok, err := t.value(i, key, "a fraction")
	if err != nil {
		return i, 0, err
	}
	v, ok := stod(tok)
	if !ok || !(v > 0 && v < 1) {
		return i, 0, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want a number strictly between 0 and 1, got %q", key, tok)
	}
	return i, v, nil
}

// fraction reads per_process_memory_fraction's value, in [0, 1]; 0 is
// refused.
func (t tokens) fraction(i int) (int, float64, error) {
	const key = "per_process_memory_fraction"
	i, tok, err := t.value(i, key, "a fraction")
	if err != nil {
		return i, 0, err
	}
	v, ok := stod(tok)
	switch {
	case !ok || !(v >= 0 && v <= 1):
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want a number in (0, 1], got %q", key, tok)
	case v == 0:
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s:0 allows no device memory at all; not simulated (want a number in (0, 1])", key)
	}
	return i, v, err
}

// boolean reads "key:True" or "key:False".
func (t tokens) boolean(i int, key string) (int, bool, error) {
	i, tok, err := t.value(i, key, "True or False")
	if err == nil && tok != "True" && tok != "False" {
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want True or False, got %q", key, tok)
	}
	return i, tok == "True", err
}

// backend reads backend:native; backend:cudaMallocAsync is a different
// allocator, which this package does not simulate.
func (t tokens) backend(i int) (int, error) {
	const key = "backend"
	i, tok, err := t.value(i, key, "native")
	switch {
	case err != nil:
	case tok == "cudaMallocAsync":
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: backend:cudaMallocAsync is CUDA's stream-ordered allocator, not the caching allocator simulated here; want backend:native")
	case tok != "native":
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: backend: want native (cudaMallocAsync is not simulated), got %q", tok)
	}
	return i, err
}

// registerThreads reads pinned_num_register_threads: a power of 2 up to 128.
func (t tokens) registerThreads(i int) (int, error) {
	const key = "pinned_num_register_threads"
	i, tok, err := t.value(i, key, "a power of 2 up to 128")
	if err != nil {
		return i, err
	}
	v, err := uintValue(tok, key, "a power of 2 up to 128")
	if err == nil && (bits.OnesCount64(v) != 1 || v > maxPinnedRegisterThreads) {
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want a power of 2 up to %d, got %d", key, maxPinnedRegisterThreads, v)
	}
	return i, err
}

// positive reads "key:N" with N > 0.
func (t tokens) positive(i int, key string) (int, error) {
	i, tok, err := t.value(i, key, "a whole number above 0")
	if err != nil {
		return i, err
	}
	v, err := uintValue(tok, key, "a whole number above 0")
	if err == nil && v == 0 {
		err = fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want a whole number above 0, got 0", key)
	}
	return i, err
}

// divisions reads roundup_power2_divisions into d, as
// AcceleratorAllocatorConfig::parseRoundUpPower2Divisions does: a single
// power of 2 for every interval, or a list [B:D,...] of MiB boundaries B,
// powers of 2, each setting the interval that starts at B (the first one
// also every interval below it), and ">:D" for every interval after the
// last one set; each D a power of 2 or 0. Intervals a list leaves alone keep
// their value (a second roundup_power2_divisions key in the same string
// starts from the first one's).
func (t tokens) divisions(i int, d *[16]uint64) (int, error) {
	const key = "roundup_power2_divisions"
	const want = "a power of 2 or a list [256:1,512:2,>:4]"
	i, tok, err := t.value(i, key, want)
	if err != nil {
		return i, err
	}
	if tok != "[" {
		v, err := uintValue(tok, key, want)
		if err != nil {
			return i, err
		}
		if bits.OnesCount64(v) != 1 {
			return i, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want a power of 2, got %d", key, v)
		}
		for k := range d {
			d[k] = v
		}
		return i, nil
	}
	first, last := true, 0
	for i++; i < len(t) && t[i] != "]"; i++ {
		at := i
		i, tok, err = t.value(i, key, "divisions, a power of 2 or 0")
		if err != nil {
			return i, err
		}
		v, err := uintValue(tok, key, "divisions, a power of 2 or 0")
		if err != nil {
			return i, err
		}
		if v != 0 && bits.OnesCount64(v) != 1 {
			return i, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want divisions that are a power of 2 or 0, got %d", key, v)
		}
		if t[at] == ">" {
			for k := last + 1; k < roundupIntervals; k++ {
				d[k] = v
			}
		} else {
			b, err := uintValue(t[at], key, "a boundary in MiB, a power of 2, or '>'")
			if err != nil {
				return i, err
			}
			if bits.OnesCount64(b) != 1 {
				return i, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: want boundaries that are a power of 2 (MiB), got %d", key, b)
			}
			k := min(bits.Len64(b)-1, roundupIntervals-1)
			if first {
				for j := range k {
					d[j] = v
				}
				first = false
			}
			d[k] = v
			last = k
		}
		next, err := t.at(i+1, key, "']'")
		if err != nil {
			return i, err
		}
		if next != "]" {
			i++ // a separator, whichever it is
		}
	}
	if i >= len(t) {
		return i, fmt.Errorf("allocator: PYTORCH_CUDA_ALLOC_CONF: %s: the list has no closing ']'", key)
	}
	return i, nil
}

// String returns c in PYTORCH_CUDA_ALLOC_CONF syntax; ParseConf reads it back
// as c when c came from ParseConf. The default Config is "".
func (c Config) String() string {
	var parts []string
	if c.MaxSplitSize > 0 {
		parts = append(parts, fmt.Sprintf("max_split_size_mb:%d", c.MaxSplitSize>>20))
	}
	if c.LargeSegmentSize > 0 {
		parts = append(parts, fmt.Sprintf("large_segment_size_mb:%d", c.LargeSegmentSize>>20))
	}
	if c.MaxNonSplitRounding > 0 {
		parts = append(parts, fmt.Sprintf("max_non_split_rounding_mb:%d", c.MaxNonSplitRounding>>20))
	}
	if c.ExpandableSegments {
		parts = append(parts, "expandable_segments:True")
	}
	if c.RoundupPower2Divisions != ([16]uint64{}) {
		list := make([]string, roundupIntervals)
		for k, v := range c.RoundupPower2Divisions {
			list[k] = fmt.Sprintf("%d:%d", uint64(1)<<k, v)
		}
		parts = append(parts, "roundup_power2_divisions:["+strings.Join(list, ",")+"]")
	}
	if c.GarbageCollectionThreshold > 0 {
		parts = append(parts, "garbage_collection_threshold:"+strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if c.PerProcessMemoryFraction > 0 {
		parts = append(parts, "per_process_memory_fraction:"+strconv.FormatFloat(c.PerProcessMemoryFraction, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// RoundSize returns the block size that a request of n bytes is rounded to
// under c: RoundSize(n) unless roundup_power2_divisions applies to n
// (round_size and roundup_power2_next_division of CUDACachingAllocator.cpp,
// in size_t arithmetic).
func (c Config) RoundSize(n int64) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	size := uint64(n)
	k := max(bits.Len64(size)-1-20, 0) // AcceleratorAllocatorConfig::roundup_power2_divisions
	d := c.RoundupPower2Divisions[min(k, roundupIntervals-1)]
	if d <= 1 || size <= MinBlockSize*d {
		return RoundSize(n)
	}
	if size&(size-1) == 0 {
		return n
	}
	floor := uint64(1) << (bits.Len64(size) - 1)
	step := floor >> (bits.Len64(d) - 1)
	if step == 0 {
		return int64(floor << 1)
	}
	if f := size &^ (step - 1); f != size {
		return int64(f + step)
	}
	return n
}
