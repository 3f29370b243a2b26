package sim

import (
	"fmt"
	"os"
	"testing"
)

func TestDbgEv(t *testing.T) {
	m, _ := Builtin("gelan-t")
	o := Options{Batch: 2, Height: 640, Width: 640, Eval: true, EmptyCache: EmptyCacheWarmUp}
	p, _ := m.program(o)
	f, _ := os.Create("/tmp/onnxmem_ev.txt")
	defer f.Close()
	for _, e := range p.Events {
		b := p.Buffers[e.Buf]
		act := "a"
		if e.Free {
			act = "f"
		}
		name := ""
		if e.Node >= 0 {
			name = p.Graph.Nodes[e.Node].Name
		}
		fmt.Fprintf(f, "%s %d %s %s\n", act, b.Bytes, b.Kind, name)
	}
}
