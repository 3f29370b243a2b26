package schedule

import "github.com/onnxmem/onnxmem/ir"

// emitter writes a program's buffers and events, and counts the holders of
// each storage: the Python references, saved tensors and views that keep it
// alive. The last holder's release frees the storage's buffer.
//
// Worked example: a conv output y is allocated with one holder (y itself);
// the batch norm that reads it saves it (two holders); the forward drops y
// once its last reader has run (one holder); the batch norm's backward
// releases what it saved, and the free of y's buffer is emitted there.
type emitter struct {
	p     *Program
	st    []storage
	phase Phase // of the events emitted now
	node  int32 // the node running now, or -1
}

// storage is one buffer while the program is built, with its holders.
type storage struct {
	buf  int32
	refs int32
}

// newBuf adds a buffer to the program, made by the current node.
func (e *emitter) newBuf(bytes int64, k Kind, v ir.ValueID) int32 {
	e.p.Buffers = append(e.p.Buffers, Buffer{Bytes: bytes, Kind: k, Value: v, Node: e.node})
	return int32(len(e.p.Buffers) - 1)
}

// emit adds the allocation or free of a buffer, in the current phase and
// node.
func (e *emitter) emit(buf int32, free bool) {
	e.p.Events = append(e.p.Events, Event{Buf: buf, Free: free, Phase: e.phase, Node: e.node})
}

// ref and unref count holders of a storage; the last unref frees it.
func (e *emitter) ref(st int32) { e.st[st].refs++ }

func (e *emitter) unref(st int32) {
	e.st[st].refs--
	if e.st[st].refs < 0 {
		panic("schedule: storage released twice")
	}
	if e.st[st].refs == 0 {
		e.emit(e.st[st].buf, true)
	}
}

// alloc creates a storage for value v (or a scratch buffer when v is NoValue)
// with one holder.
func (e *emitter) alloc(bytes int64, k Kind, v ir.ValueID) int32 {
	buf := e.newBuf(bytes, k, v)
	e.emit(buf, false)
	e.st = append(e.st, storage{buf: buf, refs: 1})
	return int32(len(e.st) - 1)
}

// scratch allocates a buffer that no storage tracks and returns it, to free
// later with freeScratch.
func (e *emitter) scratch(bytes int64, k Kind) int32 {
	buf := e.newBuf(bytes, k, ir.NoValue)
	e.emit(buf, false)
	return buf
}

// copyIf allocates a contiguous copy of the given size when cond holds, and
// returns its buffer, or -1.
func (e *emitter) copyIf(cond bool, bytes int64) int32 {
	if !cond {
		return -1
	}
	return e.scratch(bytes, Copy)
}

// freeScratch frees a buffer from scratch or copyIf, if there is one.
func (e *emitter) freeScratch(buf int32) {
	if buf >= 0 {
		e.emit(buf, true)
	}
}
