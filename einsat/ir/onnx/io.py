"""ONNX in and out, in one place: `load_onnx` (onnx.importer), `to_onnx` and `save_onnx` (onnx.export)."""

from __future__ import annotations

from einsat.ir.onnx.importer import load_onnx


def to_onnx(graph, **kwargs):
    """The graph as an `onnx.ModelProto`."""
    from einsat.ir.onnx.export import to_onnx as _to_onnx
    return _to_onnx(graph, **kwargs)


def save_onnx(graph, path, **kwargs) -> None:
    """Write the graph as an ONNX file; nothing is left at `path` if it fails."""
    from einsat.ir.onnx.export import save_onnx as _save_onnx
    _save_onnx(graph, path, **kwargs)


__all__ = ["load_onnx", "save_onnx", "to_onnx"]
