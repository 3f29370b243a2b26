module github.com/onnxmem/onnxmem

go 1.24

require (
	github.com/google/go-cmp v0.7.0
	google.golang.org/protobuf v1.36.12
)
