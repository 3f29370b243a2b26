// Package pickle writes Python pickles (protocol 2) of the values a
// torch.cuda.memory._snapshot() holds: dicts with string keys, lists,
// tuples, strings, integers, floats, booleans and None. It writes only;
// Python's pickle.load (and so torch.cuda._memory_viz) reads what it makes.
//
// Worked example: Dict{{"a", 1}, {"b", List{"x", true}}} encodes as
//
//	\x80\x02 } ( X\x01\x00\x00\x00a J\x01\x00\x00\x00 X\x01\x00\x00\x00b ] ( X\x01\x00\x00\x00x \x88 e u .
//
// (PROTO 2, EMPTY_DICT, MARK, the pairs, SETITEMS, STOP), which Python
// loads as {'a': 1, 'b': ['x', True]}. The opcodes are those of
// Lib/pickletools.py.
package pickle

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Dict is a dict with string keys, written in this order.
type Dict []Item

// Item is one key and value of a Dict.
type Item struct {
	Key   string
	Value any
}

// List is a list; Tuple a tuple.
type (
	List  []any
	Tuple []any
)

// Write pickles v to w. v is a Dict, List, Tuple, string, int, int64,
// float64, bool or nil, nested; anything else is an error.
func Write(w io.Writer, v any) error {
	bw := bufio.NewWriter(w)
	bw.Write([]byte{0x80, 2})
	if err := write(bw, v); err != nil {
		return err
	}
	bw.WriteByte('.')
	return bw.Flush()
}

func write(w *bufio.Writer, v any) error {
	switch x := v.(type) {
	case nil:
		w.WriteByte('N')
	case bool:
		if x {
			w.WriteByte(0x88)
		} else {
			w.WriteByte(0x89)
		}
	case int:
		writeInt(w, int64(x))
	case int64:
		writeInt(w, x)
	case float64:
		var b [9]byte
		b[0] = 'G'
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(x))
		w.Write(b[:])
	case string:
		var b [5]byte
		b[0] = 'X'
		binary.LittleEndian.PutUint32(b[1:], uint32(len(x)))
		w.Write(b[:])
		w.WriteString(x)
	case Dict:
		w.WriteByte('}')
		if len(x) == 0 {
			return nil
		}
		w.WriteByte('(')
		for _, it := range x {
			if err := write(w, it.Key); err != nil {
				return err
			}
			if err := write(w, it.Value); err != nil {
				return err
			}
		}
		w.WriteByte('u')
	case List:
		w.WriteByte(']')
		if len(x) == 0 {
			return nil
		}
		w.WriteByte('(')
		for _, e := range x {
			if err := write(w, e); err != nil {
				return err
			}
		}
		w.WriteByte('e')
	case Tuple:
		w.WriteByte('(')
		for _, e := range x {
			if err := write(w, e); err != nil {
				return err
			}
		}
		w.WriteByte('t')
	default:
		return fmt.Errorf("pickle: a value of type %T: want Dict, List, Tuple, string, int, int64, float64, bool or nil", v)
	}
	return nil
}

// writeInt writes BININT for 32-bit values, else LONG1 with the value's
// two's-complement little-endian bytes.
func writeInt(w *bufio.Writer, n int64) {
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		var b [5]byte
		b[0] = 'J'
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(n)))
		w.Write(b[:])
		return
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	k := 8
	// Drop redundant sign bytes, keeping the sign bit.
	for k > 1 && ((b[k-1] == 0 && b[k-2]&0x80 == 0) || (b[k-1] == 0xff && b[k-2]&0x80 != 0)) {
		k--
	}
	w.Write([]byte{0x8a, byte(k)})
	w.Write(b[:k])
}
