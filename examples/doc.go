// Package examples holds runnable examples of the onnxmem API, in
// examples_test.go, on testdata/tiny.onnx: a seven-layer YOLO-like network
// built by internal/onnxbuild.Tiny. Run them with go test ./examples -v.
//
// It also holds the notebook-style topics (Topics): questions about
// YOLOv9's training memory answered on the built-in models, each a table
// and the conclusion its numbers give. go run ./examples/<topic> prints one
// (peak_vs_batch, segments, img_vs_maxbatch, breakdown, validation,
// whatif, gpus); TestTopics checks them against examples/<topic>/output.txt.
package examples
