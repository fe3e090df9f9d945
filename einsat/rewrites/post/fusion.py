"""Epilogue fusion (PET §6.3): a convolution or matmul absorbs its bias, a residual add and the
activation that follows, becoming one `fused_conv` / `fused_matmul` kernel (einsat.ir.ops.fused).

A fused op computes `act(product + bias + residual)` in one pass, so the rules grow it one step
at a time: a product with an add becomes a fused op without activation, a fused op without
residual absorbs an add of the output's shape, an activation after a fused op without one
becomes its `activation`. A product directly under an activation fuses at once.
"""

from __future__ import annotations

from einsat.egraph.patterns import NO_INPUT, pat
from einsat.egraph.rules import Rule, Ruleset, rewrite
from einsat.rewrites.algebra.conv import ATTRS, conv

ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}


def _fused_conv(act: str, b: str = "b", z: str = NO_INPUT) -> str:
    return pat.fused_conv("x", "w", b, z, activation=f'"{act}"', **ATTRS)


def _fused_mm(act: str, c: str = NO_INPUT, z: str = NO_INPUT) -> str:
    return pat.fused_matmul("a", "b", c, z, activation=f'"{act}"')


def _activation_rules() -> list[Rule]:
    out = []
    for op, act in ACTIVATIONS.items():
        out.append(Rule(f"conv-{act}-fuse", f"{act}(conv(x, W, b)) = fused_conv(x, W, b; {act})",
                        rewrite(f"({op} {conv('x', 'w', 'b')})", _fused_conv(act))))
        out.append(Rule(f"fused-conv-{act}", f"{act}(fused_conv(...)) = fused_conv(...; {act})",
                        rewrite(f"({op} {_fused_conv('none', z='z')})", _fused_conv(act, z="z"))))
        out.append(Rule(f"matmul-{act}-fuse", f"{act}(A @ B) = fused_matmul(A, B; {act})",
                        rewrite(f"({op} (Matmul a b))", _fused_mm(act))))
        out.append(Rule(f"fused-matmul-{act}", f"{act}(fused_matmul(...)) = fused_matmul(...; {act})",
                        rewrite(f"({op} {_fused_mm('none', 'c', 'z')})", _fused_mm(act, "c", "z"))))
    return out


def _either_order(add_of: str, rhs: str, cond_of) -> str:
    """The rewrite of `(Add p q)` and of `(Add q p)` (`add_of(left, right)` builds the sum from the
    product side and the other): `add-comm` turns only a sum with a weight-only term, so a
    residual sum of two computed values (MobileNet's x + project(...)) is matched as written."""
    product, other = add_of
    return "\n".join(rewrite(f"(Add {a} {b})", rhs, cond_of(f"(Add {a} {b})"))
                      for a, b in ((product, other), (other, product)))


def _rules() -> tuple[Rule, ...]:
    conv_b, fused_c, fused_m = conv("x", "w", "b"), _fused_conv("none"), _fused_mm("none", "c")
    return tuple(_activation_rules()) + (
        Rule("conv-residual-fuse", "conv(x, W, b) + z = fused_conv(x, W, b, z)  (z of the output's shape; "
             "either order)", _either_order((conv_b, "z"), _fused_conv("none", z="z"),
                                            lambda add: f"(= (shape z) (shape {conv_b}))")),
        Rule("fused-conv-residual",
             "fused_conv(x, W, b) + z = fused_conv(x, W, b, z)  (z of the output's shape; either order)",
             _either_order((fused_c, "z"), _fused_conv("none", z="z"),
                           lambda add: f"(= (shape z) (shape {fused_c}))")),
        Rule("matmul-bias-fuse", "A @ B + c = fused_matmul(A, B, c)  (c broadcasts to the output's shape; "
             "either order)",
             _either_order(("(Matmul a b)", "c"), _fused_mm("none", "c"),
                           lambda add: f"(= (shape {add}) (shape (Matmul a b)))")),
        Rule("fused-matmul-residual",
             "fused_matmul(A, B, c) + z = fused_matmul(A, B, c, z)  (z broadcasts to the output; either order)",
             _either_order((fused_m, "z"), _fused_mm("none", "c", "z"),
                           lambda add: f"(= (shape {add}) (shape {fused_m}))")),
    )


def fusion_rules() -> Ruleset:
    return Ruleset("fusion", _rules())
