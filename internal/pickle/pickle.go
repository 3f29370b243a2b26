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

// Read unpickles the data types Write writes, as Python's pickle.dump
// writes them with protocols 2 to 5: dicts (as Dict, in insertion order),
// lists, tuples, strings, bytes, integers (int64), floats, booleans and
// None, with memo references. Anything else (a class instance, a global) is
// an error naming the opcode: a memory snapshot holds none.
func Read(r io.Reader) (any, error) {
	br := bufio.NewReader(r)
	var stack []any
	var marks []int
	memo := map[uint64]any{}
	pop := func() (any, error) {
		if len(stack) == 0 {
			return nil, fmt.Errorf("pickle: stack underflow")
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, nil
	}
	popMark := func() ([]any, error) {
		if len(marks) == 0 {
			return nil, fmt.Errorf("pickle: no mark")
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		if m > len(stack) {
			return nil, fmt.Errorf("pickle: a mark above the stack")
		}
		items := append([]any(nil), stack[m:]...)
		stack = stack[:m]
		return items, nil
	}
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		_, err := io.ReadFull(br, b)
		return b, err
	}
	le := func(n int) (uint64, error) {
		b, err := read(n)
		if err != nil {
			return 0, err
		}
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v, nil
	}
	// Lists and dicts are built in place: the stack holds pointers to them.
	type list struct{ v List }
	type dict struct{ v Dict }
	setItems := func(target any, kv []any) error {
		d, ok := target.(*dict)
		if !ok || len(kv)%2 != 0 {
			return fmt.Errorf("pickle: SETITEMS on a %T", target)
		}
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return fmt.Errorf("pickle: a dict key of type %T (only string keys are read)", kv[i])
			}
			d.v = append(d.v, Item{Key: k, Value: kv[i+1]})
		}
		return nil
	}
	var finish func(v any) any
	finish = func(v any) any {
		switch x := v.(type) {
		case *list:
			out := make(List, len(x.v))
			for i, e := range x.v {
				out[i] = finish(e)
			}
			return out
		case *dict:
			out := make(Dict, len(x.v))
			for i, it := range x.v {
				out[i] = Item{it.Key, finish(it.Value)}
			}
			return out
		case Tuple:
			out := make(Tuple, len(x))
			for i, e := range x {
				out[i] = finish(e)
			}
			return out
		}
		return v
	}
	for {
		op, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("pickle: truncated: %w", err)
		}
		switch op {
		case 0x80: // PROTO
			if _, err := br.ReadByte(); err != nil {
				return nil, err
			}
		case 0x95: // FRAME
			if _, err := le(8); err != nil {
				return nil, err
			}
		case '.': // STOP
			v, err := pop()
			if err != nil {
				return nil, err
			}
			return finish(v), nil
		case '(': // MARK
			marks = append(marks, len(stack))
		case '}':
			stack = append(stack, &dict{})
		case ']':
			stack = append(stack, &list{})
		case ')':
			stack = append(stack, Tuple{})
		case 'N':
			stack = append(stack, nil)
		case 0x88:
			stack = append(stack, true)
		case 0x89:
			stack = append(stack, false)
		case 'J', 'K', 'M': // BININT, BININT1, BININT2
			n := map[byte]int{'J': 4, 'K': 1, 'M': 2}[op]
			v, err := le(n)
			if err != nil {
				return nil, err
			}
			if op == 'J' {
				stack = append(stack, int64(int32(uint32(v))))
			} else {
				stack = append(stack, int64(v))
			}
		case 0x8a, 0x8b: // LONG1, LONG4
			n := 1
			if op == 0x8b {
				n = 4
			}
			k, err := le(n)
			if err != nil {
				return nil, err
			}
			if k > 8 {
				return nil, fmt.Errorf("pickle: an integer of %d bytes, beyond int64", k)
			}
			b, err := read(int(k))
			if err != nil {
				return nil, err
			}
			var v int64
			for i := len(b) - 1; i >= 0; i-- {
				v = v<<8 | int64(b[i])
			}
			if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
				v -= 1 << (8 * len(b))
			}
			stack = append(stack, v)
		case 'G': // BINFLOAT
			b, err := read(8)
			if err != nil {
				return nil, err
			}
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(b)))
		case 'X', 0x8c, 0x8d, 'C', 'B', 0x8e: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, SHORT_BINBYTES, BINBYTES, BINBYTES8
			n := map[byte]int{'X': 4, 0x8c: 1, 0x8d: 8, 'C': 1, 'B': 4, 0x8e: 8}[op]
			k, err := le(n)
			if err != nil {
				return nil, err
			}
			if k > 1<<24 {
				return nil, fmt.Errorf("pickle: a string of %d bytes (Read takes strings of at most 16 MiB, as a snapshot's frames are)", k)
			}
			b, err := read(int(k))
			if err != nil {
				return nil, err
			}
			stack = append(stack, string(b))
		case 0x94: // MEMOIZE
			if len(stack) == 0 {
				return nil, fmt.Errorf("pickle: MEMOIZE on an empty stack")
			}
			memo[uint64(len(memo))] = stack[len(stack)-1]
		case 'q', 'r': // BINPUT, LONG_BINPUT
			n := 1
			if op == 'r' {
				n = 4
			}
			k, err := le(n)
			if err != nil || len(stack) == 0 {
				return nil, fmt.Errorf("pickle: bad PUT")
			}
			memo[k] = stack[len(stack)-1]
		case 'h', 'j': // BINGET, LONG_BINGET
			n := 1
			if op == 'j' {
				n = 4
			}
			k, err := le(n)
			if err != nil {
				return nil, err
			}
			v, ok := memo[k]
			if !ok {
				return nil, fmt.Errorf("pickle: memo %d not set", k)
			}
			stack = append(stack, v)
		case 'a', 'e': // APPEND, APPENDS
			var items []any
			if op == 'a' {
				v, err := pop()
				if err != nil {
					return nil, err
				}
				items = []any{v}
			} else if items, err = popMark(); err != nil {
				return nil, err
			}
			if len(stack) == 0 {
				return nil, fmt.Errorf("pickle: APPEND without a list")
			}
			l, ok := stack[len(stack)-1].(*list)
			if !ok {
				return nil, fmt.Errorf("pickle: APPEND on a %T", stack[len(stack)-1])
			}
			l.v = append(l.v, items...)
		case 's', 'u': // SETITEM, SETITEMS
			var kv []any
			if op == 's' {
				if len(stack) < 2 {
					return nil, fmt.Errorf("pickle: stack underflow")
				}
				kv = append([]any(nil), stack[len(stack)-2:]...)
				stack = stack[:len(stack)-2]
			} else if kv, err = popMark(); err != nil {
				return nil, err
			}
			if len(stack) == 0 {
				return nil, fmt.Errorf("pickle: SETITEMS without a dict")
			}
			if err := setItems(stack[len(stack)-1], kv); err != nil {
				return nil, err
			}
		case 't': // TUPLE
			items, err := popMark()
			if err != nil {
				return nil, err
			}
			stack = append(stack, Tuple(items))
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op - 0x84)
			if len(stack) < n {
				return nil, fmt.Errorf("pickle: stack underflow")
			}
			t := append(Tuple(nil), stack[len(stack)-n:]...)
			stack = append(stack[:len(stack)-n], t)
		default:
			return nil, fmt.Errorf("pickle: opcode 0x%02x is not read (a snapshot holds only dicts, lists, tuples, strings, numbers, booleans and None)", op)
		}
	}
}
