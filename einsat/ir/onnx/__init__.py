"""ONNX in and out: `read` (checker, opsets, shapes), `importer` (ONNX nodes to einsat ops,
`sequences` followed statically, constants evaluated by `fold`, weights by `weights`), `export`
(einsat ops back to ONNX at the opset `opset` derives from the types), and `io`, the one-call
`load_onnx` / `to_onnx` / `save_onnx`. Nothing is imported here, so `import einsat.ir.onnx.x` loads
just what `x` needs."""
