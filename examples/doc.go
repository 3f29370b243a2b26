// Package examples holds runnable examples of the onnxmem API, in
// examples_test.go, on testdata/tiny.onnx: a seven-layer YOLO-like network
// built by internal/onnxbuild.Tiny. Run them with go test ./examples -v.
package examples
