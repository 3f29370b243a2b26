package onnxbuild

// Tiny builds the network of testdata/tiny.onnx: a YOLO-like model of seven
// top-level layers on a 3-channel image, small enough to read whole.
//
//	0  stem: Conv-BN-SiLU 3→16, 3×3 stride 2                 H/2
//	1  Conv-BN-SiLU 16→32, 3×3 stride 2                      H/4
//	2  ELAN: cv1 1×1, chunk into two 16-channel Slices,
//	   cv2 and cv3 3×3 on the second, concat of the 4 parts,
//	   cv4 1×1 back to 32 channels                           H/4
//	3  MaxPool 2×2 stride 2, then Conv-BN-SiLU 32→64 3×3      H/8
//	4  nearest upsample ×2                                   H/4
//	5  concat of layers 4 and 2 (96 channels)                H/4
//	6  head: 1×1 convs with bias to 8 channels on layers 5
//	   and 3: the two graph outputs                          H/4, H/8
//
// Layer 2's output is read again by layer 5 and layer 3's by layer 6, so the
// layer loop keeps both to the end of the forward.
func Tiny() *Builder {
	b := New("tiny")
	x := b.Input("images", 3)
	l0 := b.Layer(0).Block(x, 16, 3, 2)
	l1 := b.Layer(1).Block(l0, 32, 3, 2)

	e := b.Layer(2)
	y := e.Sub("cv1").Block(l1, 32, 1, 1)
	a, c := e.Slice(y, 0, 16), e.Slice(y, 16, 32)
	c2 := e.Sub("cv2").Block(c, 16, 3, 1)
	c3 := e.Sub("cv3").Block(c2, 16, 3, 1)
	l2 := e.Sub("cv4").Block(e.Concat(a, c, c2, c3), 32, 1, 1)

	m := b.Layer(3)
	l3 := m.Sub("cv1").Block(m.Sub("m").MaxPool(l2, 2, 2, 0), 64, 3, 1)
	l4 := b.Layer(4).Upsample(l3, 2)
	l5 := b.Layer(5).Concat(l4, l2)

	h := b.Layer(6)
	b.Output(h.Sub("m.0").Conv(l5, 8, 1, 1, Bias()), h.Sub("m.1").Conv(l3, 8, 1, 1, Bias()))
	return b
}
