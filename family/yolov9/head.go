package yolov9

import (
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The eval-mode decode of YOLOv9's detection heads, which a training export
// does not contain. DDetect and DualDDetect (models/yolo.py) return the raw
// maps in training; in eval they also turn them into boxes:
//
//	box, cls = torch.cat([di.view(b, no, -1) for di in d1], 2).split((4*reg_max, nc), 1)
//	dbox = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides
//	... the same for the second branch ...
//	y = [torch.cat((dbox, cls.sigmoid()), 1), torch.cat((dbox2, cls2.sigmoid()), 1)]
//
// Worked example, yolov9-s at batch 64, 640, half precision: the three maps of
// a branch are 64×144×(80², 40², 20²), 8400 anchors, so the cat takes
// 64·144·8400·2 B = 155 MiB; the DFL softmax over 16 bins 69 MiB, with a
// contiguous copy of its transposed input as large while it runs, freed by
// the 1×1 conv that follows, whose workspace is as large again; dist2bbox
// a handful of 64×2×8400 tensors; and
// each output y 64·84·8400·2 B = 90 MiB. The cats live until the head
// returns (box and cls are views of them), the outputs until the step ends.

// regMax is YOLOv9's number of DFL bins per box side (reg_max).
const regMax = 16

// Head is the eval-mode decode of the detection head (schedule.Head).
type Head struct{}

var _ schedule.Head = Head{}

// Resident returns the head's anchor points and strides, which the first
// eval call at an image size makes (make_anchors) and keeps in the module,
// in the half copy's float16; none when the outputs are not the head's maps.
func (Head) Resident(outs []schedule.Output) []int64 {
	a, _ := Anchors(outs)
	if a == 0 {
		return nil
	}
	es := ir.Float16.Size()
	return []int64{2 * a * es, a * es}
}

// Decode records the decode after the head's maps are computed and returns
// the decoded outputs y, which the caller keeps. It reads the head from the
// graph's outputs: maps of shape [B, 4·regMax+nc, H, W], one branch after
// the other, each branch with one map per stride (the spatial size shrinks
// within a branch and starts over at the next).
func (Head) Decode(tp schedule.HeadTape, outs []schedule.Output) []schedule.Buf {
	branches := Branches(outs)
	if len(branches) == 0 {
		return nil
	}
	var cats, dboxes, decoded []schedule.Buf
	type shape struct{ n, nc, a, es int64 }
	var shapes []shape
	alloc := func(n int64) schedule.Buf { return tp.Alloc(n, "eval decode") }
	for _, br := range branches {
		d := outs[br[0]].Dims
		sh := shape{n: d[0], nc: d[1] - 4*regMax, es: outs[br[0]].DType.Size()}
		for _, j := range br {
			dv := outs[j].Dims
			sh.a += dv[2] * dv[3]
		}
		shapes = append(shapes, sh)
		t := func(ch int64) int64 { return sh.n * ch * sh.a * sh.es }
		cat := alloc(t(4*regMax + sh.nc))
		// DFL: x.view(b, 4, 16, a).transpose(2, 1).softmax(1) softmaxes a
		// contiguous copy of the transposed view into a contiguous
		// [b, 16, 4, a]; the 1×1 conv of the 16 bins to their expectation
		// takes the workspace cuDNN's heuristics give that call, which the
		// card's tables hold (conv_sweep.py --dfl: none at small batches,
		// its input and 16 bytes, or 272 bytes at large ones).
		tr := alloc(t(4 * regMax))
		soft := alloc(t(4 * regMax)) // softmax over the bins
		tp.Free(tr)
		dist := alloc(t(4)) // the DFL conv's expectation
		tp.Conv(schedule.ConvCall{Which: "fwd", N: sh.n, Cin: regMax, Cout: 1, H: 4, W: sh.a, OutH: 4, OutW: sh.a,
			KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilationH: 1, DilationW: 1, Groups: 1, ElemSize: sh.es})
		tp.Free(soft)
		// dist2bbox: x1y1 = anchor - lt; x2y2 = anchor + rb;
		// c_xy = (x1y1 + x2y2) / 2; wh = x2y2 - x1y1; cat((c_xy, wh)).
		x1y1 := alloc(t(2))
		x2y2 := alloc(t(2))
		sum := alloc(t(2))
		cxy := alloc(t(2))
		tp.Free(sum)
		wh := alloc(t(2))
		boxes := alloc(t(4))
		// dist2bbox's frame drops its locals in order: distance (the
		// DFL's output, whose last views lt and rb go next), then x1y1,
		// x2y2, c_xy and wh (the official traces, calibration §29).
		for _, b := range []schedule.Buf{dist, x1y1, x2y2, cxy, wh} {
			tp.Free(b)
		}
		dbox := alloc(t(4)) // * strides
		tp.Free(boxes)
		cats = append(cats, cat)
		dboxes = append(dboxes, dbox)
	}
	for _, sh := range shapes {
		t := func(ch int64) int64 { return sh.n * ch * sh.a * sh.es }
		sig := alloc(t(sh.nc))
		y := alloc(t(4 + sh.nc))
		tp.Free(sig)
		decoded = append(decoded, y)
	}
	// The head returns: its locals, the cats' views and the dboxes, die.
	for i := range cats {
		tp.Free(cats[i])
		tp.Free(dboxes[i])
	}
	return decoded
}

// Branches groups the graph's outputs into detection branches, as indices
// into outs: 4-D maps with more than 4·regMax channels, a new branch
// starting where the spatial size grows again. It returns nil when some
// output is not such a map.
func Branches(outs []schedule.Output) [][]int {
	var out [][]int
	prev := int64(-1)
	for j, o := range outs {
		d := o.Dims
		if len(d) != 4 || d[1] <= 4*regMax {
			return nil
		}
		if hw := d[2] * d[3]; prev < 0 || hw >= prev {
			out = append(out, nil)
			prev = hw
		} else {
			prev = hw
		}
		out[len(out)-1] = append(out[len(out)-1], j)
	}
	return out
}

// Anchors returns the anchors of the detection head: the sum of H·W over the
// maps of one branch, and the branch count; 0, 0 when the outputs are not a
// detection head's maps.
func Anchors(outs []schedule.Output) (anchors int64, branches int) {
	br := Branches(outs)
	if len(br) == 0 {
		return 0, 0
	}
	for _, j := range br[0] {
		d := outs[j].Dims
		anchors += d[2] * d[3]
	}
	return anchors, len(br)
}
