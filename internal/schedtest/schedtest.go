// Package schedtest holds the helpers that the tests of package schedule
// and of the model families share: building a program from an onnxbuild
// graph, describing its events, and checking the invariants of every
// program.
package schedtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Kit builds programs as one model family prepares and runs them.
type Kit struct {
	// Prepare is the family's Prepare.
	Prepare func(*ir.Graph) (*ir.Graph, error)
	// Holder is the family's Holder, used when a Config has none.
	Holder schedule.Holder
}

// Load serializes a built model, decodes it and prepares it.
func (k Kit) Load(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = k.Prepare(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// Program infers g at batch×C×16×16 and builds its step; see ProgramAt.
func (k Kit) Program(t *testing.T, g *ir.Graph, batch int64, cfg schedule.Config) *schedule.Program {
	t.Helper()
	return k.ProgramAt(t, g, ir.Binding{Batch: batch, Height: 16, Width: 16}, cfg)
}

// ProgramAt infers g at a binding, builds its step (with the kit's Holder
// unless cfg has one) and checks the step's invariants (CheckBalanced).
func (k Kit) ProgramAt(t *testing.T, g *ir.Graph, b ir.Binding, cfg schedule.Config) *schedule.Program {
	t.Helper()
	if cfg.Holder == nil {
		cfg.Holder = k.Holder
	}
	s, err := g.Infer(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := schedule.Build(g, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	CheckBalanced(t, p)
	return p
}

// Describe writes an event as "+kind what": what is the graph value the
// buffer holds (or whose gradient it is), else its size in bytes.
func Describe(p *schedule.Program, e schedule.Event) string {
	sign := "+"
	if e.Free {
		sign = "-"
	}
	buf := p.Buffers[e.Buf]
	if buf.Value != ir.NoValue {
		return fmt.Sprintf("%s%s %s", sign, buf.Kind, p.Graph.Values[buf.Value].Name)
	}
	return fmt.Sprintf("%s%s %d", sign, buf.Kind, buf.Bytes)
}

// Events describes the events of p in [from, to) that keep, when not nil,
// accepts.
func Events(p *schedule.Program, from, to int, keep func(schedule.Event) bool) []string {
	var out []string
	for _, e := range p.Events[from:to] {
		if keep == nil || keep(e) {
			out = append(out, Describe(p, e))
		}
	}
	return out
}

// AtNode keeps the events emitted while the named node runs.
func AtNode(p *schedule.Program, name string) func(schedule.Event) bool {
	return func(e schedule.Event) bool { return e.Node >= 0 && p.Graph.Nodes[e.Node].Name == name }
}

// CheckBalanced checks the invariants of every program: the phases come in
// order at the indexes Program records; no buffer is allocated twice, freed
// before its allocation or freed twice; resident buffers are never touched;
// the input batch, allocated before the step, is freed by the step's last
// event; the once buffers (cuBLAS workspaces) are placed in order and never
// touched either; and after the step exactly the parameter gradients are live, each a
// ParamGrad allocated in the backward.
func CheckBalanced(t *testing.T, p *schedule.Program) {
	t.Helper()
	const (
		unborn = iota
		live
		dead
	)
	state := make([]int, len(p.Buffers))
	for _, b := range p.Resident {
		state[b] = -1
	}
	if len(p.Persistent) != len(p.PersistentAt) {
		t.Fatalf("%d once buffers, %d places", len(p.Persistent), len(p.PersistentAt))
	}
	for j, b := range p.Persistent {
		state[b] = -1 // allocated by the first step, before event OnceAt[j]
		if at := p.PersistentAt[j]; at < 0 || at > len(p.Events) || (j > 0 && at < p.PersistentAt[j-1]) {
			t.Fatalf("once buffer %d at event %d of %d", b, at, len(p.Events))
		}
	}
	state[p.Input] = live
	last := schedule.Forward
	// A recomputation runs inside the backward.
	order := func(ph schedule.Phase) schedule.Phase {
		if ph == schedule.Recompute {
			return schedule.Backward
		}
		return ph
	}
	for i, e := range p.Events {
		what := fmt.Sprintf("event %d (%s)", i, Describe(p, e))
		switch {
		case order(e.Phase) < order(last):
			t.Fatalf("%s: phase %s after %s", what, e.Phase, last)
		case state[e.Buf] < 0:
			t.Fatalf("%s: a resident buffer in the step", what)
		case !e.Free && state[e.Buf] != unborn:
			t.Fatalf("%s: allocated twice", what)
		case e.Free && state[e.Buf] != live:
			t.Fatalf("%s: freed while not live", what)
		}
		last = e.Phase
		state[e.Buf] = live
		if e.Free {
			state[e.Buf] = dead
		}
	}
	bounds := []struct {
		name  string
		at    int
		phase schedule.Phase // of the event at the bound
	}{{"ForwardEnd", p.ForwardEnd, schedule.LossPhase}, {"BackwardStart", p.BackwardStart, schedule.Backward}, {"BackwardEnd", p.BackwardEnd, schedule.Cleanup}}
	if p.ForwardEnd == p.BackwardEnd { // an eval step: no loss, no backward
		bounds = bounds[:0]
	}
	for _, b := range bounds {
		if b.at <= 0 || b.at >= len(p.Events) || p.Events[b.at].Phase != b.phase || p.Events[b.at-1].Phase >= b.phase {
			t.Errorf("%s = %d is not where phase %s starts", b.name, b.at, b.phase)
		}
	}
	if p.StepEnd != len(p.Events)-1 || p.Events[p.StepEnd].Buf != p.Input || !p.Events[p.StepEnd].Free {
		t.Errorf("StepEnd = %d of %d events: the input batch must be freed last", p.StepEnd, len(p.Events))
	}
	grads := map[int32]bool{}
	for _, b := range p.ParamGrads {
		grads[b] = true
		if k := p.Buffers[b].Kind; k != schedule.ParamGrad {
			t.Errorf("ParamGrads holds buffer %d of kind %s", b, k)
		}
	}
	for b, st := range state {
		if st == live && !grads[int32(b)] {
			t.Errorf("buffer %d (%s) is still live after the step", b, Describe(p, schedule.Event{Buf: int32(b)}))
		}
		if st != live && grads[int32(b)] {
			t.Errorf("parameter gradient %d (%s) is not live after the step", b, Describe(p, schedule.Event{Buf: int32(b)}))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// Diff reports the first difference of two event listings, with context.
func Diff(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := 0; i < max(len(got), len(want)); i++ {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("%s: event %d is %q, want %q\ngot:\n\t%s\nwant:\n\t%s", what, i, g, w,
				strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			return
		}
	}
}
