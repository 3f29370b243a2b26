"""Checks that the ONNX files onnxmem export-model writes are valid ONNX.

For every *.onnx in a folder (default calibration/exported, written by
calibration/models_valid.sh) it
  1. loads the model without its external data,
  2. gives every weight that has no data zeros of its dims and dtype
     (a weightless export's weights point to files that do not exist),
  3. runs onnx.checker.check_model with full_check (which also runs ONNX's
     shape inference),
  4. runs it in onnxruntime at batch 1 on zero images of 640x640 and 320x320,
     and checks every output's shape: [1, 64 + classes, S/s, S/s] for the
     strides s = 8, 16, 32, twice (auxiliary branch, then main) for YOLOv9,
     once for GELAN, the classes read from the file name (-cN) or 80.

It prints one JSON line per model and size and exits 1 if any check fails.
Run it where onnx and onnxruntime are installed:

    python calibration/models_valid.py [DIR]

Recorded output: calibration/results/models_valid.txt.
"""
import glob
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort


def fill_zeros(model):
    """Replaces external or empty initializers by zeros; returns how many."""
    n = 0
    for i, init in enumerate(model.graph.initializer):
        external = init.data_location == onnx.TensorProto.EXTERNAL
        has_data = bool(init.raw_data or init.float_data or init.int32_data or init.int64_data
                        or init.double_data or init.uint64_data)
        if not external and (has_data or int(np.prod(init.dims)) == 0):
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
        z = numpy_helper.from_array(np.zeros(tuple(init.dims), dtype=dtype), init.name)
        model.graph.initializer[i].CopyFrom(z)
        n += 1
    return n


def expected(name, size):
    m = re.search(r"-c(\d+)", name)
    classes = int(m.group(1)) if m else 80
    heads = 2 if name.startswith("yolov9") else 1
    return [[1, 64 + classes, size // s, size // s] for _ in range(heads) for s in (8, 16, 32)]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "calibration/exported"
    files = sorted(glob.glob(os.path.join(folder, "*.onnx")))
    if not files:
        sys.exit(f"models_valid: no .onnx files in {folder}; run calibration/models_valid.sh")
    print(json.dumps({"onnx": onnx.__version__, "onnxruntime": ort.__version__}))
    failed = 0
    for path in files:
        name = os.path.basename(path)[: -len(".onnx")]
        model = onnx.load(path, load_external_data=False)
        filled = fill_zeros(model)
        row = {"model": name, "opset": model.opset_import[0].version, "nodes": len(model.graph.node),
               "initializers": len(model.graph.initializer), "zero_filled": filled}
        try:
            onnx.checker.check_model(model, full_check=True)
            row["checker"] = "ok"
        except Exception as e:  # noqa: BLE001
            row["checker"] = f"error: {e}"
            failed += 1
        try:
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            for size in (640, 320):
                x = np.zeros((1, 3, size, size), dtype=np.float32)
                outs = sess.run(None, {sess.get_inputs()[0].name: x})
                got = [list(o.shape) for o in outs]
                want = expected(name, size)
                # Training-mode BatchNormalization outputs are not graph
                # outputs, so the outputs are the head maps alone.
                ok = got == want
                row[f"ort_{size}"] = "ok" if ok else f"shapes {got}, want {want}"
                failed += not ok
        except Exception as e:  # noqa: BLE001
            row["ort"] = f"error: {e}"
            failed += 1
        print(json.dumps(row), flush=True)
    print(json.dumps({"files": len(files), "failed": failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
