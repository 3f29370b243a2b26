// The architectures, as the repository's model configurations write them
// (models/detect/yolov9-*.yaml): one line per top-level layer, with the
// layers it reads (-1: the one before) and the module's arguments.

package models

import "fmt"

// kind is a module type of the configurations.
type kind uint8

// The module types. The arguments each takes, after the input channels that
// the layers it reads give:
const (
	silence    kind = iota // Silence: none; passes its input on
	conv                   // Conv: c2, k, s
	elan1                  // ELAN1: c2, c3, c4
	repELAN                // RepNCSPELAN4: c2, c3, c4, n
	adown                  // ADown: c2
	aconv                  // AConv: c2
	sppelan                // SPPELAN: c2, c3
	upsample               // nn.Upsample(None, 2, "nearest"): none
	concat                 // Concat(1): none
	cblinear               // CBLinear: the channels of each part
	cbfuse                 // CBFuse: which part of each CBLinear read
	detect                 // DDetect: none (the class count is an option)
	dualDetect             // DualDDetect: none
)

// String returns the module's class name, such as "RepNCSPELAN4".
func (k kind) String() string {
	names := [...]string{"Silence", "Conv", "ELAN1", "RepNCSPELAN4", "ADown", "AConv", "SPPELAN",
		"Upsample", "Concat", "CBLinear", "CBFuse", "DDetect", "DualDDetect"}
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// layer is one line of a configuration.
type layer struct {
	from []int
	kind kind
	args []int64
}

// l is a layer that reads the one before it.
func l(k kind, args ...int64) layer { return layer{from: []int{-1}, kind: k, args: args} }

// at is a layer that reads the layers from.
func at(from []int, k kind, args ...int64) layer { return layer{from: from, kind: k, args: args} }

// f lists the layers a layer reads.
func f(from ...int) []int { return from }

// yolov9T is yolov9-t.yaml: layers 0-21 are the main branch, 22-28 the
// auxiliary one.
var yolov9T = []layer{
	l(conv, 16, 3, 2),           // 0-P1/2
	l(conv, 32, 3, 2),           // 1-P2/4
	l(elan1, 32, 32, 16),        // 2
	l(aconv, 64),                // 3-P3/8
	l(repELAN, 64, 64, 32, 3),   // 4
	l(aconv, 96),                // 5-P4/16
	l(repELAN, 96, 96, 48, 3),   // 6
	l(aconv, 128),               // 7-P5/32
	l(repELAN, 128, 128, 64, 3), // 8
	l(sppelan, 128, 64),         // 9
	l(upsample),                 // 10
	at(f(-1, 6), concat),        // 11
	l(repELAN, 96, 96, 48, 3),   // 12
	l(upsample),                 // 13
	at(f(-1, 4), concat),        // 14
	l(repELAN, 64, 64, 32, 3),   // 15 (P3/8)
	l(aconv, 48),                // 16
	at(f(-1, 12), concat),       // 17
	l(repELAN, 96, 96, 48, 3),   // 18 (P4/16)
	l(aconv, 64),                // 19
	at(f(-1, 9), concat),        // 20
	l(repELAN, 128, 128, 64, 3), // 21 (P5/32)
	at(f(8), sppelan, 128, 64),  // 22
	l(upsample),                 // 23
	at(f(-1, 6), concat),        // 24
	l(repELAN, 96, 96, 48, 3),   // 25
	l(upsample),                 // 26
	at(f(-1, 4), concat),        // 27
	l(repELAN, 64, 64, 32, 3),   // 28
	at(f(28, 25, 22, 15, 18, 21), dualDetect),
}

// yolov9S is yolov9-s.yaml: yolov9-t at twice the width.
var yolov9S = []layer{
	l(conv, 32, 3, 2),            // 0-P1/2
	l(conv, 64, 3, 2),            // 1-P2/4
	l(elan1, 64, 64, 32),         // 2
	l(aconv, 128),                // 3-P3/8
	l(repELAN, 128, 128, 64, 3),  // 4
	l(aconv, 192),                // 5-P4/16
	l(repELAN, 192, 192, 96, 3),  // 6
	l(aconv, 256),                // 7-P5/32
	l(repELAN, 256, 256, 128, 3), // 8
	l(sppelan, 256, 128),         // 9
	l(upsample),                  // 10
	at(f(-1, 6), concat),         // 11
	l(repELAN, 192, 192, 96, 3),  // 12
	l(upsample),                  // 13
	at(f(-1, 4), concat),         // 14
	l(repELAN, 128, 128, 64, 3),  // 15 (P3/8)
	l(aconv, 96),                 // 16
	at(f(-1, 12), concat),        // 17
	l(repELAN, 192, 192, 96, 3),  // 18 (P4/16)
	l(aconv, 128),                // 19
	at(f(-1, 9), concat),         // 20
	l(repELAN, 256, 256, 128, 3), // 21 (P5/32)
	at(f(8), sppelan, 256, 128),  // 22
	l(upsample),                  // 23
	at(f(-1, 6), concat),         // 24
	l(repELAN, 192, 192, 96, 3),  // 25
	l(upsample),                  // 26
	at(f(-1, 4), concat),         // 27
	l(repELAN, 128, 128, 64, 3),  // 28
	at(f(28, 25, 22, 15, 18, 21), dualDetect),
}

// yolov9M is yolov9-m.yaml: layers 1-22 are the main branch; 23-37, a
// second backbone fed by CBLinear/CBFuse from the first, the auxiliary one.
var yolov9M = []layer{
	l(silence),                             // 0
	l(conv, 32, 3, 2),                      // 1-P1/2
	l(conv, 64, 3, 2),                      // 2-P2/4
	l(repELAN, 128, 128, 64, 1),            // 3
	l(aconv, 240),                          // 4-P3/8
	l(repELAN, 240, 240, 120, 1),           // 5
	l(aconv, 360),                          // 6-P4/16
	l(repELAN, 360, 360, 180, 1),           // 7
	l(aconv, 480),                          // 8-P5/32
	l(repELAN, 480, 480, 240, 1),           // 9
	l(sppelan, 480, 240),                   // 10
	l(upsample),                            // 11
	at(f(-1, 7), concat),                   // 12
	l(repELAN, 360, 360, 180, 1),           // 13
	l(upsample),                            // 14
	at(f(-1, 5), concat),                   // 15
	l(repELAN, 240, 240, 120, 1),           // 16
	l(aconv, 184),                          // 17
	at(f(-1, 13), concat),                  // 18
	l(repELAN, 360, 360, 180, 1),           // 19
	l(aconv, 240),                          // 20
	at(f(-1, 10), concat),                  // 21
	l(repELAN, 480, 480, 240, 1),           // 22
	at(f(5), cblinear, 240),                // 23
	at(f(7), cblinear, 240, 360),           // 24
	at(f(9), cblinear, 240, 360, 480),      // 25
	at(f(0), conv, 32, 3, 2),               // 26-P1/2
	l(conv, 64, 3, 2),                      // 27-P2/4
	l(repELAN, 128, 128, 64, 1),            // 28
	l(aconv, 240),                          // 29-P3/8
	at(f(23, 24, 25, -1), cbfuse, 0, 0, 0), // 30
	l(repELAN, 240, 240, 120, 1),           // 31
	l(aconv, 360),                          // 32-P4/16
	at(f(24, 25, -1), cbfuse, 1, 1),        // 33
	l(repELAN, 360, 360, 180, 1),           // 34
	l(aconv, 480),                          // 35-P5/32
	at(f(25, -1), cbfuse, 2),               // 36
	l(repELAN, 480, 480, 240, 1),           // 37
	at(f(31, 34, 37, 16, 19, 22), dualDetect),
}

// yolov9C is yolov9-c.yaml, laid out as yolov9-m with ADown in place of
// AConv.
var yolov9C = []layer{
	l(silence),                             // 0
	l(conv, 64, 3, 2),                      // 1-P1/2
	l(conv, 128, 3, 2),                     // 2-P2/4
	l(repELAN, 256, 128, 64, 1),            // 3
	l(adown, 256),                          // 4-P3/8
	l(repELAN, 512, 256, 128, 1),           // 5
	l(adown, 512),                          // 6-P4/16
	l(repELAN, 512, 512, 256, 1),           // 7
	l(adown, 512),                          // 8-P5/32
	l(repELAN, 512, 512, 256, 1),           // 9
	l(sppelan, 512, 256),                   // 10
	l(upsample),                            // 11
	at(f(-1, 7), concat),                   // 12
	l(repELAN, 512, 512, 256, 1),           // 13
	l(upsample),                            // 14
	at(f(-1, 5), concat),                   // 15
	l(repELAN, 256, 256, 128, 1),           // 16
	l(adown, 256),                          // 17
	at(f(-1, 13), concat),                  // 18
	l(repELAN, 512, 512, 256, 1),           // 19
	l(adown, 512),                          // 20
	at(f(-1, 10), concat),                  // 21
	l(repELAN, 512, 512, 256, 1),           // 22
	at(f(5), cblinear, 256),                // 23
	at(f(7), cblinear, 256, 512),           // 24
	at(f(9), cblinear, 256, 512, 512),      // 25
	at(f(0), conv, 64, 3, 2),               // 26-P1/2
	l(conv, 128, 3, 2),                     // 27-P2/4
	l(repELAN, 256, 128, 64, 1),            // 28
	l(adown, 256),                          // 29-P3/8
	at(f(23, 24, 25, -1), cbfuse, 0, 0, 0), // 30
	l(repELAN, 512, 256, 128, 1),           // 31
	l(adown, 512),                          // 32-P4/16
	at(f(24, 25, -1), cbfuse, 1, 1),        // 33
	l(repELAN, 512, 512, 256, 1),           // 34
	l(adown, 512),                          // 35-P5/32
	at(f(25, -1), cbfuse, 2),               // 36
	l(repELAN, 512, 512, 256, 1),           // 37
	at(f(31, 34, 37, 16, 19, 22), dualDetect),
}

// convDown returns table with each ADown(c) a Conv(c, 3, 2) reading the
// same layers: yolov9.yaml's downsampling where yolov9-c.yaml has ADown.
func convDown(table []layer) []layer {
	out := make([]layer, len(table))
	for i, l := range table {
		out[i] = l
		if l.kind == adown {
			out[i] = layer{from: l.from, kind: conv, args: []int64{l.args[0], 3, 2}}
		}
	}
	return out
}

// yolov9E is yolov9-e.yaml: an auxiliary backbone (1-9) feeds the main one
// (15-28) through CBLinear/CBFuse at every level; 29-35 are the auxiliary
// neck, 36-48 the main one.
var yolov9E = []layer{
	l(silence),                                           // 0
	l(conv, 64, 3, 2),                                    // 1-P1/2
	l(conv, 128, 3, 2),                                   // 2-P2/4
	l(repELAN, 256, 128, 64, 2),                          // 3
	l(adown, 256),                                        // 4-P3/8
	l(repELAN, 512, 256, 128, 2),                         // 5
	l(adown, 512),                                        // 6-P4/16
	l(repELAN, 1024, 512, 256, 2),                        // 7
	l(adown, 1024),                                       // 8-P5/32
	l(repELAN, 1024, 512, 256, 2),                        // 9
	at(f(1), cblinear, 64),                               // 10
	at(f(3), cblinear, 64, 128),                          // 11
	at(f(5), cblinear, 64, 128, 256),                     // 12
	at(f(7), cblinear, 64, 128, 256, 512),                // 13
	at(f(9), cblinear, 64, 128, 256, 512, 1024),          // 14
	at(f(0), conv, 64, 3, 2),                             // 15-P1/2
	at(f(10, 11, 12, 13, 14, -1), cbfuse, 0, 0, 0, 0, 0), // 16
	l(conv, 128, 3, 2),                                   // 17-P2/4
	at(f(11, 12, 13, 14, -1), cbfuse, 1, 1, 1, 1),        // 18
	l(repELAN, 256, 128, 64, 2),                          // 19
	l(adown, 256),                                        // 20-P3/8
	at(f(12, 13, 14, -1), cbfuse, 2, 2, 2),               // 21
	l(repELAN, 512, 256, 128, 2),                         // 22
	l(adown, 512),                                        // 23-P4/16
	at(f(13, 14, -1), cbfuse, 3, 3),                      // 24
	l(repELAN, 1024, 512, 256, 2),                        // 25
	l(adown, 1024),                                       // 26-P5/32
	at(f(14, -1), cbfuse, 4),                             // 27
	l(repELAN, 1024, 512, 256, 2),                        // 28
	at(f(9), sppelan, 512, 256),                          // 29
	l(upsample),                                          // 30
	at(f(-1, 7), concat),                                 // 31
	l(repELAN, 512, 512, 256, 2),                         // 32
	l(upsample),                                          // 33
	at(f(-1, 5), concat),                                 // 34
	l(repELAN, 256, 256, 128, 2),                         // 35
	at(f(28), sppelan, 512, 256),                         // 36
	l(upsample),                                          // 37
	at(f(-1, 25), concat),                                // 38
	l(repELAN, 512, 512, 256, 2),                         // 39
	l(upsample),                                          // 40
	at(f(-1, 22), concat),                                // 41
	l(repELAN, 256, 256, 128, 2),                         // 42 (P3/8)
	l(adown, 256),                                        // 43
	at(f(-1, 39), concat),                                // 44
	l(repELAN, 512, 512, 256, 2),                         // 45 (P4/16)
	l(adown, 512),                                        // 46
	at(f(-1, 36), concat),                                // 47
	l(repELAN, 512, 1024, 512, 2),                        // 48 (P5/32)
	at(f(35, 32, 29, 42, 45, 48), dualDetect),
}

// span lists the integers [from, to).
func span(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// gelan returns the GELAN model of a YOLOv9 configuration: the layers keep,
// renumbered, then a DDetect on the main branch, the inputs of the second
// half of DualDDetect's. A Silence layer that is left out passes its reader
// the input. It panics on a keep list that drops a layer the kept ones read
// (the tables are fixed: the tests build every model).
func gelan(table []layer, keep []int) []layer {
	renum := make([]int, len(table)) // old index → new, -1 for the input
	for i := range renum {
		renum[i] = -2
	}
	resolve := func(old int) int {
		for old >= 0 && renum[old] == -2 && table[old].kind == silence {
			old = source(old, table[old].from[0])
		}
		if old >= 0 && renum[old] == -2 {
			panic(fmt.Sprintf("models: gelan: layer %d is read but not kept", old))
		}
		if old < 0 {
			return -1
		}
		return renum[old]
	}
	var out []layer
	for _, old := range keep {
		l := table[old]
		from := make([]int, len(l.from))
		for k, f := range l.from {
			from[k] = resolve(source(old, f))
			if n := len(out); from[k] < 0 || (from[k] == n-1 && f < 0) {
				from[k] -= n // relative: the layer before, or the input
			}
		}
		renum[old] = len(out)
		out = append(out, layer{from: from, kind: l.kind, args: l.args})
	}
	head := table[len(table)-1]
	main := head.from[len(head.from)/2:]
	from := make([]int, len(main))
	for k, f := range main {
		from[k] = resolve(f)
	}
	return append(out, layer{from: from, kind: detect})
}
