package onnxmem

import "github.com/onnxmem/onnxmem/schedule"

// CuDNNWorkspace is the workspace policy used by Simulate.
var CuDNNWorkspace func(schedule.ConvCall) int64
