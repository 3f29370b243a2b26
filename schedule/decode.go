package schedule

import "github.com/onnxmem/onnxmem/ir"

// The eval-mode decode of YOLOv9's detection heads, which a training export
// does not contain. DDetect and DualDDetect (models/yolo.py in YOLOv9) return
// the raw maps in training; in eval they also turn them into boxes:
//
//	box, cls = torch.cat([di.view(b, no, -1) for di in d1], 2).split((4*reg_max, nc), 1)
//	dbox = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides
//	... the same for the second branch ...
//	y = [torch.cat((dbox, cls.sigmoid()), 1), torch.cat((dbox2, cls2.sigmoid()), 1)]
//
// Worked example, yolov9-s at batch 64, 640, half precision: the three maps of
// a branch are 64×144×(80², 40², 20²), 8400 anchors, so the cat takes
// 64·144·8400·2 B = 155 MiB; the DFL softmax over 16 bins 69 MiB, freed by
// the 1×1 conv that follows; dist2bbox a handful of 64×2×8400 tensors; and
// each output y 64·84·8400·2 B = 90 MiB. The cats live until the head
// returns (box and cls are views of them), the outputs until the step ends.

// regMax is YOLOv9's number of DFL bins per box side (reg_max).
const regMax = 16

// decode emits the head's decode after its maps are computed. It reads the
// head from the graph's outputs: maps of shape [B, 4·regMax+nc, H, W], one
// branch after the other, each branch with one map per stride (the spatial
// size shrinks within a branch and starts over at the next).
func (b *builder) decode() {
	branches := b.headBranches()
	if len(branches) == 0 {
		return
	}
	var cats, dboxes []int32
	type shape struct{ n, nc, a, es int64 }
	var shapes []shape
	for _, br := range branches {
		d := b.s.Dims[br[0]]
		sh := shape{n: d[0], nc: d[1] - 4*regMax, es: b.dt[br[0]].Size()}
		for _, v := range br {
			dv := b.s.Dims[v]
			sh.a += dv[2] * dv[3]
		}
		shapes = append(shapes, sh)
		t := func(ch int64) int64 { return sh.n * ch * sh.a * sh.es }
		cat := b.alloc(t(4*regMax+sh.nc), Activation, ir.NoValue)
		soft := b.alloc(t(4*regMax), Activation, ir.NoValue) // softmax over the bins
		dist := b.alloc(t(4), Activation, ir.NoValue)        // the DFL conv's expectation
		b.unref(soft)
		// dist2bbox: x1y1 = anchor - lt; x2y2 = anchor + rb;
		// c_xy = (x1y1 + x2y2) / 2; wh = x2y2 - x1y1; cat((c_xy, wh)).
		x1y1 := b.alloc(t(2), Activation, ir.NoValue)
		x2y2 := b.alloc(t(2), Activation, ir.NoValue)
		sum := b.alloc(t(2), Activation, ir.NoValue)
		cxy := b.alloc(t(2), Activation, ir.NoValue)
		b.unref(sum)
		wh := b.alloc(t(2), Activation, ir.NoValue)
		boxes := b.alloc(t(4), Activation, ir.NoValue)
		for _, st := range []int32{x1y1, x2y2, cxy, wh, dist} {
			b.unref(st)
		}
		dbox := b.alloc(t(4), Activation, ir.NoValue) // * strides
		b.unref(boxes)
		cats = append(cats, cat)
		dboxes = append(dboxes, dbox)
	}
	for i, sh := range shapes {
		t := func(ch int64) int64 { return sh.n * ch * sh.a * sh.es }
		sig := b.alloc(t(sh.nc), Activation, ir.NoValue)
		y := b.alloc(t(4+sh.nc), Activation, ir.NoValue)
		b.unref(sig)
		b.decoded = append(b.decoded, y)
		_ = i
	}
	// The head returns: its locals, the cats' views and the dboxes, die.
	for i := range cats {
		b.unref(cats[i])
		b.unref(dboxes[i])
	}
}

// headBranches groups the graph's outputs into detection branches: 4-D maps
// with more than 4·regMax channels, a new branch starting where the spatial
// size grows again.
func (b *builder) headBranches() [][]ir.ValueID {
	var out [][]ir.ValueID
	prev := int64(-1)
	for _, v := range b.g.Outputs {
		d := b.s.Dims[v]
		if len(d) != 4 || d[1] <= 4*regMax {
			return nil
		}
		if hw := d[2] * d[3]; prev < 0 || hw >= prev {
			out = append(out, nil)
			prev = hw
		} else {
			prev = hw
		}
		out[len(out)-1] = append(out[len(out)-1], v)
	}
	return out
}

// HeadAnchors returns the anchors of the graph's detection head at shapes s:
// the sum of H·W over the maps of one branch, and the branch count; 0, 0
// when the outputs are not a YOLO head's maps.
func HeadAnchors(g *ir.Graph, s *ir.Shapes) (anchors int64, branches int) {
	b := &builder{g: g, s: s}
	br := b.headBranches()
	if len(br) == 0 {
		return 0, 0
	}
	for _, v := range br[0] {
		d := s.Dims[v]
		anchors += d[2] * d[3]
	}
	return anchors, len(br)
}
