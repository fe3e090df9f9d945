"""Matrix products: associativity, linearity, scalars, transposes, batched and GEMM forms.

A scalar factor of one block of a merged product (BERT's 1/sqrt(d) on K, after it moved through
the transposes) moves into that block's weight, keeping the product merged.

Shapes: `A @ B` with B a matrix ([k, n]) and A of any rank >= 2 ([..., m, k]), or A and B of
equal rank with equal batch dims. Rules that move operands around are guarded so every term
they build is well-typed (and the rank-1 special cases of NumPy's matmul never arise).
"""

from __future__ import annotations

from einsat.egraph.patterns import pat
from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.rewrites.guards import dtype, rank, same_shape, scalar, shape

FOLDED = "(vec-of (* (vec-get sa 0) (vec-get sa 1)) (vec-get sa 2))"  # [b, m, k] as [b*m, k]


def _swap_last(r: int) -> tuple[int, ...]:
    """The perm swapping the last two of `r` dims."""
    return tuple(range(r - 2)) + (r - 1, r - 2)


def _matrix(*xs: str) -> tuple[str, ...]:
    return tuple(rank(x, 2) for x in xs)


def _scaled(factor: str, x: str) -> str:
    return f"(Mul (Fill {factor} (vec-empty) dt) {x})"


def _gemm(ta: int, tb: int, bias: bool) -> str:
    """gemm with the given transpose flags, as matmul, products by alpha and beta unless 1."""
    a = pat.transpose("a", perm=(1, 0)) if ta else "a"
    b = pat.transpose("b", perm=(1, 0)) if tb else "b"
    lhs = pat.gemm("a", "b", *(["c"] if bias else []), alpha="alpha", beta="beta", trans_a=ta, trans_b=tb)
    out = []
    for scale_a in (False, True):
        for scale_b in ((False, True) if bias else (False,)):
            product = _scaled("alpha", f"(Matmul {a} {b})") if scale_a else f"(Matmul {a} {b})"
            rhs = f"(Add {product} {_scaled('beta', 'c') if scale_b else 'c'})" if bias else product
            facts = [f"(= t {lhs})", dtype("a", "dt"), "(!= alpha 1.0)" if scale_a else "(= alpha 1.0)"]
            if bias:  # c is a tensor, not (Absent)
                facts += ["(!= beta 1.0)" if scale_b else "(= beta 1.0)", shape("c", "sc")]
            out.append(rule(facts, [f"(union t {rhs})"]))
    return "\n".join(out)


def _block_scalar(n: int, i: int) -> str:
    """s * split(A @ concat(W_0..W_n-1))[i] = split(A @ concat(.., s * W_i, ..))[i], blocks j != i equal."""
    ws = [f"w{k}" for k in range(n)]
    scaled = [f"(Mul s w{k})" if k == i else f"w{k}" for k in range(n)]
    old = pat.split(f"(Matmul a {pat.concat(*ws, axis=1)})", axis="ax", sizes="sz")
    new = pat.split(f"(Matmul a {pat.concat(*scaled, axis=1)})", axis="ax", sizes="sz")
    return rule([f"(= m {old})", f"(= t (Mul s (Get m {i})))", scalar("s"), "(const s)"],
                [f"(let m2 {new})", f"(union t (Get m2 {i}))"]
                + [f"(union (Get m {k}) (Get m2 {k}))" for k in range(n) if k != i])


def _rules() -> tuple[Rule, ...]:
    return (
        Rule("matmul-assoc", "(A @ B) @ C = A @ (B @ C)  (B, C matrices)",
             birewrite("(Matmul (Matmul a b) c)", "(Matmul a (Matmul b c))", *_matrix("b", "c"))),
        Rule("matmul-add-left", "(A + B) @ C = A @ C + B @ C",
             birewrite("(Matmul (Add a b) c)", "(Add (Matmul a c) (Matmul b c))", same_shape("a", "b"),
                       rank("c", 2))),
        Rule("matmul-add-right", "A @ (B + C) = A @ B + A @ C",
             birewrite("(Matmul a (Add b c))", "(Add (Matmul a b) (Matmul a c))", same_shape("b", "c"),
                       rank("b", 2))),
        Rule("matmul-scalar-left", "(s * A) @ B = s * (A @ B) for a scalar s",
             birewrite("(Matmul (Mul s a) b)", "(Mul s (Matmul a b))", scalar("s"))),
        Rule("matmul-scalar-right", "A @ (s * B) = s * (A @ B) for a scalar s",
             birewrite("(Matmul a (Mul s b))", "(Mul s (Matmul a b))", scalar("s"))),
        Rule("matmul-transpose", "(A @ B)^T = B^T @ A^T  (the last two dims swapped)",
             "\n".join(birewrite(pat.transpose("(Matmul a b)", perm=_swap_last(r)),
                                 f"(Matmul {pat.transpose('b', perm=_swap_last(r))}"
                                 f" {pat.transpose('a', perm=_swap_last(r))})",
                                 rank("a", r), rank("b", r)) for r in (2, 3, 4))),
        Rule("batchmatmul-matmul", "batchmatmul(A, B) = A @ B  ([b, m, k] @ [b, k, n])",
             birewrite("(Batchmatmul a b)", "(Matmul a b)", rank("a", 3), rank("b", 3),
                       "(= (vec-get (shape a) 0) (vec-get (shape b) 0))")),
        Rule("matmul-fold-batch", "A @ W = reshape((reshape(A, [b*m, k]) @ W), [b, m, n])  (A [b, m, k], W [k, n])",
             rewrite("(Matmul a w)",
                     pat.reshape(f"(Matmul {pat.reshape('a', shape=FOLDED)} w)",
                                 shape="(vec-of (vec-get sa 0) (vec-get sa 1) (vec-get sw 1))"),
                     shape("a", "sa"), shape("w", "sw"), rank("a", 3), rank("w", 2))),
        Rule("merged-block-scalar", "s * split(A @ concat(W1, .., Wn))[i] = split(A @ concat(.., s * Wi, ..))[i]",
             "\n".join(_block_scalar(n, i) for n in (2, 3, 4) for i in range(n))),
        Rule("gemm-expand", "gemm(A, B, C; α, β) = α * (op(A) @ op(B)) + β * C  (op: transpose if flagged; no 1 *)",
             "\n".join(_gemm(ta, tb, bias) for ta in (0, 1) for tb in (0, 1) for bias in (True, False))),
    )


def matmul_rules() -> Ruleset:
    return Ruleset("matmul", _rules(), varying=True)
