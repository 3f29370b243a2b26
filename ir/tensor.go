// Decoding TensorProto dims, dtypes and small contents.

package ir

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/onnxmem/onnxmem/internal/onnx"
)

// tensor returns a TensorProto's dtype and dims and, for a tensor of at most
// maxSmall elements whose data is in the file, its contents: ints for integer
// types and for float types whose values are all whole, floats for float types.
// External data is never read. Negative dims, an element count that overflows
// int64 and raw data of the wrong length are errors.
func tensor(t *onnx.TensorProto) (dt DType, dims []int64, ints []int64, floats []float64, err error) {
	dt, dims = DType(t.GetDataType()), t.GetDims()
	if dims == nil {
		dims = []int64{} // a scalar: known, of rank 0
	}
	n, ok := int64(1), true
	for i, d := range dims {
		if d < 0 {
			return dt, nil, nil, nil, fmt.Errorf("negative dim %d at axis %d", d, i)
		}
		if n, ok = mulOK(n, d); !ok {
			return dt, nil, nil, nil, fmt.Errorf("element count of dims %v overflows int64", dims)
		}
	}
	if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
		return dt, dims, nil, nil, nil
	}
	if raw := t.GetRawData(); raw != nil {
		if size := dt.Size(); size > 0 && (n > math.MaxInt64/size || int64(len(raw)) != n*size) {
			return dt, nil, nil, nil, fmt.Errorf("raw data has %d bytes, dims %v of %s need %d", len(raw), dims, dt, n*size)
		}
	}
	if n > maxSmall {
		return dt, dims, nil, nil, nil
	}
	ints, floats = contents(t, dt, int(n))
	return dt, dims, ints, floats, nil
}

// contents decodes n elements of a small tensor; see tensor.
func contents(t *onnx.TensorProto, dt DType, n int) (ints []int64, floats []float64) {
	raw := t.GetRawData()
	if raw == nil {
		return typedContents(t, dt, n)
	}
	size := int(dt.Size())
	le := binary.LittleEndian
	isFloat := dt == Float32 || dt == Float64
	if isFloat {
		floats = make([]float64, n)
	} else {
		ints = make([]int64, n)
	}
	for i := 0; i < n; i++ {
		b := raw[i*size:]
		switch dt {
		case Float32:
			floats[i] = float64(math.Float32frombits(le.Uint32(b)))
		case Float64:
			floats[i] = math.Float64frombits(le.Uint64(b))
		case Int8:
			ints[i] = int64(int8(b[0]))
		case Uint8, Bool:
			ints[i] = int64(b[0])
		case Int16:
			ints[i] = int64(int16(le.Uint16(b)))
		case Uint16:
			ints[i] = int64(le.Uint16(b))
		case Int32:
			ints[i] = int64(int32(le.Uint32(b)))
		case Uint32:
			ints[i] = int64(le.Uint32(b))
		case Int64, Uint64:
			ints[i] = int64(le.Uint64(b))
		default:
			return nil, nil
		}
	}
	if isFloat {
		return wholes(floats), floats
	}
	return ints, nil
}

// typedContents decodes the typed repeated fields that hold data when raw_data
// is absent.
func typedContents(t *onnx.TensorProto, dt DType, n int) (ints []int64, floats []float64) {
	switch dt {
	case Float32:
		floats = convert[float64](sized(t.GetFloatData(), n))
	case Float64:
		floats = convert[float64](sized(t.GetDoubleData(), n))
	case Int8, Uint8, Int16, Uint16, Int32, Bool:
		ints = convert[int64](sized(t.GetInt32Data(), n))
	case Int64:
		ints = convert[int64](sized(t.GetInt64Data(), n))
	case Uint32, Uint64:
		ints = convert[int64](sized(t.GetUint64Data(), n))
	}
	if floats != nil {
		return wholes(floats), floats
	}
	return ints, nil
}

// number is the element types of TensorProto's typed data fields.
type number interface {
	~int32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// convert converts each element of s to U, keeping nil as nil.
func convert[U, T number](s []T) []U {
	if s == nil {
		return nil
	}
	out := make([]U, len(s))
	for i, x := range s {
		out[i] = U(x)
	}
	return out
}

// sized returns s when it has n elements, else nil.
func sized[T any](s []T, n int) []T {
	if len(s) != n {
		return nil
	}
	return s
}

// wholes returns floats as int64s when every one is a whole number in int64's
// range, else nil.
func wholes(floats []float64) []int64 {
	if floats == nil {
		return nil
	}
	ints := make([]int64, len(floats))
	for i, f := range floats {
		if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return nil
		}
		ints[i] = int64(f)
	}
	return ints
}

// mulOK returns a*b for non-negative a and b, and false when it overflows.
func mulOK(a, b int64) (int64, bool) {
	if a != 0 && b > math.MaxInt64/a {
		return 0, false
	}
	return a * b, true
}
