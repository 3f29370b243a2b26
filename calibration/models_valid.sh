#!/bin/sh
# Writes every built-in model with onnxmem export-model into
# calibration/exported (weightless, plus yolov9-t with 20 classes and zero
# weights, and two what-if variants of -width, -depth and -classes), for
# calibration/models_valid.py to check. Run from the
# repository's root.
set -e
mkdir -p calibration/exported
for n in $(go run ./cmd/onnxmem models -json | python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(sys.stdin)["models"]))'); do
	go run ./cmd/onnxmem export-model -o "calibration/exported/$n.onnx" "$n"
done
go run ./cmd/onnxmem export-model -weights -classes 20 -o calibration/exported/yolov9-t-c20-weights.onnx yolov9-t
go run ./cmd/onnxmem export-model -width 0.75 -depth 2 -classes 20 -o calibration/exported/yolov9-c-w0.75-d2-c20.onnx yolov9-c
go run ./cmd/onnxmem export-model -width 0.5 -depth 0.5 -o calibration/exported/gelan-e-w0.5-d0.5.onnx gelan-e
