"""Tensor algebra expressions (EinNet §3): the representation EinNet's derivations work on.

    from einsat.ir.expr import Expr, Iter, Read, Call, evaluate, fingerprint, parse
    e = opdef(Op.CONV).expression(input_types, attrs)   # conv as L Σ x[...]·w[...]
    evaluate(e, [x, w])                                 # NumPy semantics (== the op's)
    fingerprint(e)                                      # the canonical print (EinNet §6.2)

Modules: `index` (quasi-affine subscripts), `nodes` (expressions, scopes, bodies), `printer`
(the canonical printer = fingerprint, and its parser), `readable` (a one-line form), `semantics`
(NumPy evaluation), `measure` (FLOPs, intensity, multi-linearity), `onnx` (export), `build`
(helpers for the ops' `expression` methods). Pure Python and NumPy: part of the ir layer.
"""

from einsat.ir.expr.index import DivMod, Index, as_index, const, format_index, var
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Iter, Read
from einsat.ir.expr.printer import canonical, fingerprint, parse
from einsat.ir.expr.readable import show
from einsat.ir.expr.semantics import evaluate

__all__ = ["Body", "Call", "Const", "DivMod", "Expr", "Guard", "Index", "Iter", "Read", "as_index", "canonical",
           "const", "evaluate", "fingerprint", "format_index", "parse", "show", "var"]
