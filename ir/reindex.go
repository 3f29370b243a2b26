package ir

import "fmt"

// Reindex renumbers g's nodes in slice order and recomputes every value's
// Producer and Consumers and the caches Infer uses. Call it after editing
// Nodes or appending Values, as graph rewrites do. It fails, with an error
// starting "ir: ", when a node reads a value that no earlier node or input
// defines, or when two nodes write one value.
func (g *Graph) Reindex() error {
	for i := range g.Values {
		v := &g.Values[i]
		v.ID = ValueID(i)
		v.Producer = -1
		v.Consumers = v.Consumers[:0:0]
	}
	defined := make([]bool, len(g.Values))
	for i := range g.Values {
		if k := g.Values[i].Kind; k == Input || k == Initializer {
			defined[i] = true
		}
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		n.ID = int32(i)
		for _, v := range n.Inputs {
			if v == NoValue {
				continue
			}
			if int(v) >= len(g.Values) || !defined[v] {
				return fmt.Errorf("ir: node %q: input %d is not defined before it", n.Name, v)
			}
			g.Values[v].Consumers = append(g.Values[v].Consumers, n.ID)
		}
		for _, v := range n.Outputs {
			if v == NoValue {
				continue
			}
			if g.Values[v].Producer >= 0 {
				return fmt.Errorf("ir: value %q has two producers", g.Values[v].Name)
			}
			g.Values[v].Producer = n.ID
			defined[v] = true
		}
	}
	g.ops = make([]opKind, len(g.Nodes))
	for i := range g.Nodes {
		g.ops[i] = shapeKindOf(&g.Nodes[i])
	}
	return nil
}
