"""einsat's exceptions: every one names what the user must look at (file, node, op, shape)."""

from __future__ import annotations


class EinsatError(Exception):
    """Base class of every error einsat raises on purpose."""


class GraphError(EinsatError):
    """A graph is malformed: an undefined value, a duplicate name, a cycle."""


class ShapeError(EinsatError):
    """Shapes or dtypes do not fit an op."""


class AttributeValueError(EinsatError):
    """An op attribute is unknown, missing or has an invalid value."""


class OnnxError(EinsatError):
    """An ONNX file or model cannot be read or written."""


class InputError(EinsatError):
    """Run-time inputs are missing, extra, or of the wrong shape or dtype."""


class ExecutionError(EinsatError):
    """A node failed while running."""


class FrontendError(EinsatError):
    """An imperative function uses a construct functionalization cannot express (a data-dependent
    shape, Python control flow on a tensor value, a mutation through an opaque call); the message
    names the user's source line."""


class ExtractionError(EinsatError):
    """No valid program can be extracted from an e-graph (or a selection is invalid)."""


class VerificationError(EinsatError):
    """An optimized program does not compute what its input program computes (`status`
    "failed"), or, where a proof was required, could not be shown to ("inconclusive").
    `report` is the comparison behind it (`einsat.verify.numeric.NumericReport`), when there is one."""

    def __init__(self, message: str, report=None, status: str = "failed"):
        super().__init__(message)
        self.report = report
        self.status = status


def describe_node(node, types=None) -> str:
    """`node 'conv1' (conv) with inputs x: [1, 3, 224, 224] f32, w: [...]` for error messages."""
    text = f"node {node.name!r} ({node.op_name})"
    if types is not None:
        parts = []
        for name in node.inputs:
            t = types.get(name) if name else None
            parts.append(f"{name}: {t}" if t is not None else f"{name}: ?")
        if parts:
            text += " with inputs " + ", ".join(parts)
    return text
