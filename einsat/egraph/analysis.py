"""The shape analysis: `shape(t)` and `dtype(t)` inside egglog, so that rules can be guarded.

Every value that enters from a program is seeded with its type (`terms.seed_type`). The
`shape_analysis` rules compute the shape of the terms rewrites create, for the ops rewrites
create: element-wise ops (broadcasting), matmul, convolution, pooling, transpose, reshape,
expand, concat, split, pad and fills. A term whose shape is unknown is simply not matched by a
shape-guarded rule (never wrongly matched). Both tables merge with `old`: the rules are sound,
so two shapes in one e-class are equal (`tests/egraph` checks every e-class's nodes agree).

`ord(t)` numbers the values of inserted programs (multi-pattern rules merge only those, each
set once, in `ord` order: their own products never merge again). `const(t)`: t is computed from
weights alone; `varying(t)`: t depends on a program input (algebra rules rewrite only those:
weight-only terms are evaluated at compile time, rewriting them is waste).

Outside egglog, `infer_types` types every exported e-class with the registry's own `infer`:
the export never depends on which shapes egglog happened to compute.
"""

from __future__ import annotations

from typing import Mapping

from einsat.egraph.data import ABSENT, EClass
from einsat.egraph.encoding import Signature
from einsat.egraph.patterns import WILD, apply, pat
from einsat.errors import EinsatError
from einsat.ir.groups import MATMULS
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType

RULESET = "shape_analysis"

TABLES = """
(function shape (Tensor) IVec :merge old)
(function dtype (Tensor) String :merge old)
(function bcast (IVec IVec) IVec :merge old)
(relation bcast-want (IVec IVec))
(function permute (IVec IVec) IVec :merge old)
(relation permute-want (IVec IVec))
(function cat-shape (i64 TList) IVec :merge old)
(relation cat-want (i64 TList))
(relation ew2 (Tensor Tensor Tensor))
(relation same-shape (Tensor Tensor))
(relation const (Tensor))
(relation const-list (TList))
(relation const-multi (Multi))
(function ord (Tensor) i64 :merge (min old new))
(relation varying (Tensor))
(relation varying-list (TList))
(relation varying-multi (Multi))
"""
ANALYSIS_FUNCTIONS = ("shape", "dtype", "bcast", "bcast-want", "permute", "permute-want", "cat-shape",
                      "cat-want", "ew2", "same-shape", "const", "const-list", "const-multi", "ord", "varying",
                      "varying-list", "varying-multi")

HELPERS = """
; bcast(a, b): NumPy broadcasting of two shapes, from the last dim backwards
(rule ((bcast-want a b) (= (vec-length a) 0)) ((set (bcast a b) b)))
(rule ((bcast-want a b) (= (vec-length b) 0) (> (vec-length a) 0)) ((set (bcast a b) a)))
(rule ((bcast-want a b) (> (vec-length a) 0) (> (vec-length b) 0)) ((bcast-want (vec-pop a) (vec-pop b))))
(rule ((bcast-want a b) (= la (vec-length a)) (= lb (vec-length b)) (> la 0) (> lb 0)
       (= r (bcast (vec-pop a) (vec-pop b))) (= x (vec-get a (- la 1))) (= y (vec-get b (- lb 1)))
       (= x y)) ((set (bcast a b) (vec-push r x))))
(rule ((bcast-want a b) (= la (vec-length a)) (= lb (vec-length b)) (> la 0) (> lb 0)
       (= r (bcast (vec-pop a) (vec-pop b))) (= x (vec-get a (- la 1))) (= 1 (vec-get b (- lb 1))))
      ((set (bcast a b) (vec-push r x))))
(rule ((bcast-want a b) (= la (vec-length a)) (= lb (vec-length b)) (> la 0) (> lb 0)
       (= r (bcast (vec-pop a) (vec-pop b))) (= 1 (vec-get a (- la 1))) (= y (vec-get b (- lb 1))))
      ((set (bcast a b) (vec-push r y))))
(rule ((ew2 t a b) (= sa (shape a)) (= sb (shape b))) ((bcast-want sa sb)))
(rule ((ew2 t a b) (= s (bcast (shape a) (shape b)))) ((set (shape t) s)))
(rule ((ew2 t a b) (= d (dtype a))) ((set (dtype t) d)))
(rule ((same-shape t a) (= s (shape a))) ((set (shape t) s)))
; permute(s, p)[i] = s[p[i]]
(rule ((permute-want s p) (= (vec-length p) 0)) ((set (permute s p) p)))
(rule ((permute-want s p) (> (vec-length p) 0)) ((permute-want s (vec-pop p))))
(rule ((permute-want s p) (= n (vec-length p)) (> n 0) (= r (permute s (vec-pop p))))
      ((set (permute s p) (vec-push r (vec-get s (vec-get p (- n 1)))))))
; cat-shape(axis, [a, ...]): the shape of their concatenation
(rule ((cat-want ax (TCons a rest))) ((cat-want ax rest)))
(rule ((cat-want ax l) (= l (TCons a (TNil))) (= sa (shape a))) ((set (cat-shape ax l) sa)))
(rule ((cat-want ax l) (= l (TCons a rest)) (= sa (shape a)) (= sr (cat-shape ax rest)))
      ((set (cat-shape ax l) (vec-set sa ax (+ (vec-get sa ax) (vec-get sr ax))))))
"""


def _only(sig: Signature, k: int, name: str) -> str:
    """`sig`'s op with input `k` bound to `name`, its other inputs and attributes wild."""
    return apply(sig.op, *[name if j == k else WILD for j in range(sig.slots)])


def _sliding(nsp: int, kernel, dilated: bool) -> list[str]:
    """The output spatial dims of a sliding-window op (conv, pooling) over `sx`, with strides
    `st`, pads `pd`, dilations `dl` and the kernel dims `kernel(i)`."""
    dims = []
    for i in range(nsp):
        k = kernel(i)
        dl = f"(vec-get dl {i})" if dilated else "1"
        span = f"(+ (* {dl} (- {k} 1)) 1)"
        padded = f"(+ (vec-get sx {2 + i}) (+ (vec-get pd {i}) (vec-get pd {nsp + i})))"
        dims.append(f"(+ (/ (- {padded} {span}) (vec-get st {i})) 1)")
    return dims


CONST_HELPERS = """
; const(t): t is computed from weights alone (weight-only: foldable at compile time)
(rule ((= t (Weight n))) ((const t)))
(rule ((= t (Fill v s d))) ((const t)))
(rule ((= t (Absent))) ((const t)))
(rule ((= l (TNil))) ((const-list l)))
(rule ((= l (TCons a r)) (const a) (const-list r)) ((const-list l)))
(rule ((= t (Get m i)) (const-multi m)) ((const t)))
"""


VARYING_HELPERS = """
(rule ((= t (Input n))) ((varying t)))
(rule ((= l (TCons a r)) (varying a)) ((varying-list l)))
(rule ((= l (TCons a r)) (varying-list r)) ((varying-list l)))
(rule ((= t (Get m i)) (varying-multi m)) ((varying t)))
"""


def varying_rules(sigs: Mapping[Op, Signature]) -> str:
    """`varying(t)` for every op with an input that depends on a program input."""
    out = [VARYING_HELPERS]
    for op, sig in sorted(sigs.items(), key=lambda kv: kv[1].name):
        table = "varying-multi" if sig.multi else "varying"
        if sig.variadic:
            out.append(f"(rule ((= t {apply(op, inputs='l')}) (varying-list l)) (({table} t)))")
        for k in range(sig.slots):
            out.append(f"(rule ((= t {_only(sig, k, 'a')}) (varying a)) (({table} t)))")
    return "\n".join(out)


def const_rules(sigs: Mapping[Op, Signature]) -> str:
    """`const(t)` for every foldable op applied to weight-only inputs (the weight-only analysis,
    as `egraph.weights.weight_only` computes it outside egglog)."""
    out = [CONST_HELPERS]
    for op, sig in sorted(sigs.items(), key=lambda kv: kv[1].name):
        if not opdef(op).foldable:
            continue
        if sig.variadic:
            facts, term = "(const-list l)", apply(op, inputs="l")
        else:
            facts = " ".join(f"(const a{k})" for k in range(sig.slots))
            term = apply(op, *[f"a{k}" for k in range(sig.slots)])
        table = "const-multi" if sig.multi else "const"
        out.append(f"(rule ((= t {term}) {facts}) (({table} t)))".replace(" )", ")"))
    return "\n".join(out)


def shape_rules(sigs: Mapping[Op, Signature]) -> str:
    """The `shape_analysis` rules for the registry's ops (with the weight-only analysis)."""
    out = [HELPERS, const_rules(sigs), varying_rules(sigs)]
    for op, sig in sorted(sigs.items(), key=lambda kv: kv[1].name):
        d = opdef(op)
        if d.elementwise and not sig.variadic and sig.slots == 2:
            out.append(f"(rule ((= t {apply(op, 'a', 'b')})) ((ew2 t a b)))")
        elif (d.elementwise and sig.slots == 1) or d.shape_of_first:  # shape(out) = shape(first input)
            out.append(f"(rule ((= t {_only(sig, 0, 'a')})) ((same-shape t a)))")
        # dtype(out) = dtype(first input) where the registry says so (comparisons, casts... are seeded)
        if not sig.variadic and sig.slots >= 1 and d.dtype_of_first and not sig.multi:
            out.append(f"(rule ((= t {_only(sig, 0, 'a')}) (= d (dtype a))) ((set (dtype t) d)))")
    out.append(_op_rules(sigs))
    return "\n".join(out)


def _op_rules(sigs: Mapping[Op, Signature]) -> str:
    rules = []
    products = [sig for sig in sigs.values() if sig.op in MATMULS]
    for sig in products + [sigs[Op.BATCHMATMUL]]:
        m = apply(sig.op, "a", "b", *[WILD] * (sig.slots - 2))
        rules.append(
            f"(rule ((= t {m}) (= sa (shape a)) (= sb (shape b)) (= r (vec-length sa)) (= r (vec-length sb))"
            " (>= r 2) (= (vec-pop (vec-pop sa)) (vec-pop (vec-pop sb)))"
            " (= (vec-get sa (- r 1)) (vec-get sb (- r 2))))"
            " ((set (shape t) (vec-set sa (- r 1) (vec-get sb (- r 1))))))")
    for sig in products:  # [..., m, k] @ [k, n]
        rules.append(
            f"(rule ((= t {apply(sig.op, 'a', 'b', *[WILD] * (sig.slots - 2))}) (= sa (shape a)) (= sb (shape b))"
            " (= 2 (vec-length sb))"
            " (= r (vec-length sa)) (> r 2) (= (vec-get sa (- r 1)) (vec-get sb 0)))"
            " ((set (shape t) (vec-set sa (- r 1) (vec-get sb 1)))))")
    convs = [sig for sig in sigs.values() if sig.op in (Op.CONV, Op.FUSED_CONV)]
    for nsp in (1, 2, 3):
        for sig in convs:
            p = apply(sig.op, "x", "w", *[WILD] * (sig.slots - 2), stride="st", padding="pd", dilation="dl")
            dims = _sliding(nsp, lambda i: f"(vec-get sw {2 + i})", True)
            rules.append(f"(rule ((= t {p}) (= sx (shape x)) (= sw (shape w)) (= {nsp + 2} (vec-length sx)))"
                         f" ((set (shape t) (vec-of (vec-get sx 0) (vec-get sw 0) {' '.join(dims)}))))")
        for op, dil in ((Op.AVGPOOL, None), (Op.MAXPOOL, "dl")):
            named = dict(kernel="k", stride="st", padding="pd", ceil_mode=0)
            if dil:
                named["dilation"] = "dl"
            dims = _sliding(nsp, lambda i: f"(vec-get k {i})", dil is not None)
            rules.append(f"(rule ((= t {apply(op, 'x', **named)}) (= sx (shape x)) (= {nsp + 2} (vec-length sx)))"
                         f" ((set (shape t) (vec-of (vec-get sx 0) (vec-get sx 1) {' '.join(dims)}))))")
        ones = " ".join(["1"] * nsp)
        rules.append(f"(rule ((= t {pat.global_avgpool('x')}) (= sx (shape x))"
                     f" (= {nsp + 2} (vec-length sx)))"
                     f" ((set (shape t) (vec-of (vec-get sx 0) (vec-get sx 1) {ones}))))")
    rules.append(f"(rule ((= t {pat.transpose('x', perm='p')}) (= sx (shape x))) ((permute-want sx p)))")
    rules.append(f"(rule ((= t {pat.transpose('x', perm='p')}) (= s (permute (shape x) p))) ((set (shape t) s)))")
    for op in (Op.RESHAPE, Op.EXPAND):
        rules.append(f"(rule ((= t {apply(op, 'x', shape='s')})) ((set (shape t) s)))")
    cat = pat.concat(axis="ax", inputs="l")
    rules.append(f"(rule ((= t {cat})) ((cat-want ax l)))")
    rules.append(f"(rule ((= t {cat}) (= s (cat-shape ax l))) ((set (shape t) s)))")
    rules.append(f"(rule ((= l (TCons a _)) (= t {cat}) (= d (dtype a))) ((set (dtype t) d)))")
    split = pat.split("x", axis="ax", sizes="n")
    rules.append(f"(rule ((= g (Get {split} i)) (= sx (shape x))) ((set (shape g) (vec-set sx ax (vec-get n i)))))")
    rules.append(f"(rule ((= g (Get {split} i)) (= d (dtype x))) ((set (dtype g) d)))")
    for r in range(1, 7):
        dims = " ".join(f"(+ (vec-get sx {i}) (+ (vec-get p {i}) (vec-get p {r + i})))" for i in range(r))
        rules.append(f"(rule ((= t {pat.pad('x', pads='p')}) (= sx (shape x))"
                     f" (= {r} (vec-length sx)))"
                     f" ((set (shape t) (vec-of {dims}))))")
    rules.append("(rule ((= t (Fill v s dt))) ((set (shape t) s) (set (dtype t) dt)))")
    return "\n".join(rules)


def infer_types(classes: Mapping[int, EClass], leaf_types: Mapping[tuple[str, str], TensorType]) -> None:
    """Fill `EClass.type` for every class from its e-nodes with the registry's `infer`.

    A class is typed by its first e-node whose children are typed; passes repeat until nothing
    changes (children usually come first, so two or three passes suffice)."""
    pending = [c for c in classes.values() if c.type is None]
    while pending:
        left = []
        for cls in pending:
            for node in cls.nodes:
                t = _node_type(node, classes, leaf_types)
                if t is not None:
                    cls.type = t
                    break
            else:
                left.append(cls)
        if len(left) == len(pending):
            raise EinsatError(f"e-classes {[c.id for c in left[:5]]} have no typable e-node")
        pending = left


def _node_type(node, classes, leaf_types) -> TensorType | None:
    if node.leaf is not None:
        return leaf_types[node.leaf]
    ins = []
    for c in node.children:
        if c == ABSENT:
            ins.append(None)
            continue
        t = classes[c].type
        if t is None:
            return None
        ins.append(t)
    return opdef(node.op).infer(ins, node.attrs)[node.output]
