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

// Ultralytics builds a graph shaped like an Ultralytics YOLOv8 training
// export: layers "/model.i/…" as YOLOv9's, a stride-8, -16 and -32 feature
// map, and a Detect head whose box branch at each level is
// Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4·16, 1)) and
// class branch Sequential(Conv(x, c3, 3), Conv(c3, c3, 3),
// nn.Conv2d(c3, nc, 1)), their maps concatenated: [B, 64+nc, H, W] at each
// level. Its box convolution has one group, where YOLOv9's DDetect has four.
//
//	0  stem: Conv-BN-SiLU 3→16, 3×3 stride 2                 H/2
//	1  Conv-BN-SiLU 16→32, 3×3 stride 2                      H/4
//	2  Conv-BN-SiLU 32→32, 3×3 stride 2                      H/8
//	3  Conv-BN-SiLU 32→64, 3×3 stride 2                      H/16
//	4  Conv-BN-SiLU 64→64, 3×3 stride 2                      H/32
//	5  Detect(nc=2) on layers 2, 3 and 4
func Ultralytics() *Builder {
	b := New("ultralytics")
	x := b.Input("images", 3)
	var maps []T
	for i, c := range []int64{16, 32, 32, 64, 64} {
		x = b.Layer(i).Block(x, c, 3, 2)
		if i >= 2 {
			maps = append(maps, x)
		}
	}
	d := b.Layer(5)
	const nc = 2
	var outs []T
	for i, m := range maps {
		box := d.Sub("cv2").Index(i)
		y := box.Index(1).Block(box.Index(0).Block(m, 64, 3, 1), 64, 3, 1)
		y = box.Index(2).Conv(y, 64, 1, 1, Bias())
		cls := d.Sub("cv3").Index(i)
		z := cls.Index(1).Block(cls.Index(0).Block(m, 32, 3, 1), 32, 3, 1)
		z = cls.Index(2).Conv(z, nc, 1, 1, Bias())
		outs = append(outs, d.Concat(y, z))
	}
	b.Output(outs...)
	return b
}

// ResNetLike builds a torchvision-style network: the root's children
// conv1, bn1, layer1 (a Sequential of two residual blocks) and a head conv,
// named as torch.onnx names them.
func ResNetLike() *Builder {
	b := New("resnet-like")
	x := b.Module("conv1").Conv(b.Input("images", 3), 8, 3, 2)
	x = b.Module("bn1").BatchNorm(x)
	l1 := b.Module("layer1")
	for i := range 2 {
		blk := l1.Index(i)
		y := blk.Sub("conv1").Conv(x, 8, 3, 1)
		y = blk.Sub("bn1").BatchNorm(y)
		x = blk.Add(y, x)
	}
	b.Output(b.Module("head").Conv(x, 4, 1, 1))
	return b
}
