"""The `chain` attribute of `eop` / `eop_multi`: the chain of registry ops a fused eOperator was
made of, so that its ONNX export writes those ops back (each op's own `to_onnx`:
LayerNormalization, Softmax, Gelu, Add, ...) instead of the expression's expansion.

The fusion generator (`einsat.rewrites.derive.fusion`) writes it; nothing reads it but
`to_onnx`. The expression stays the node's semantics (NumPy, verification, cost, the GPU
kernel); the chain is provenance (`Attr(provenance=True)`: signatures and profiles leave it out)
and computes the same values by construction, since the expression is the composition of the
chain's ops' own expressions. The empty string: no chain, the expression route.

The text is canonical JSON (sorted keys, no spaces), so equal chains are equal attributes:

    {"ops":[[op,attrs,refs],...],"out":[j0,j1,...]}

- `ops`: the chain's ops in program order (each reads only earlier ones), each its registry op
  name, its normalized attributes (tuples as lists) and one reference per input:
  `["in",k]` the eop's input k, `["op",j]` the output of the chain's op j,
  `["const",v,shape,dtype]` a one-element weight the fusion folded into the expression (its
  value, shape and dtype: a half chain's statistics read fp32 ones);
- `out`: per output of the node, the chain op that computes it (one for `eop`, one per
  expression for `eop_multi`).
"""

from __future__ import annotations

import functools
import json

import numpy as np

from einsat.errors import OnnxError
from einsat.ir.graph import Node
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType


class Chain:
    """A decoded `chain` attribute: `steps` [(op, attrs, refs)], `out` [op index per output]."""

    def __init__(self, steps: tuple, out: tuple[int, ...]):
        self.steps = steps
        self.out = out

    def inputs_read(self) -> set[int]:
        return {r[1] for _, _, refs in self.steps for r in refs if r[0] == "in"}


def encode(steps, out) -> str:
    """The attribute text of `steps` [(Op, attrs, refs)] and `out` (see the module doc); raises
    TypeError when an attribute has no JSON form (an array: such a chain is not written)."""
    payload = {"ops": [[op.value, dict(attrs), [list(r) for r in refs]] for op, attrs, refs in steps],
               "out": list(out)}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=_refuse)


def _refuse(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"a chain attribute cannot hold {type(value).__name__}")


@functools.lru_cache(maxsize=4096)
def decode(text: str) -> Chain:
    """The chain of an attribute text; ValueError naming what is malformed."""
    try:
        payload = json.loads(text)
        raw, out = payload["ops"], tuple(int(j) for j in payload["out"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"chain {text[:80]!r} is not a chain's JSON: {e}") from None
    steps = []
    for j, step in enumerate(raw):
        try:
            name, attrs, refs = step
            op = Op(name)
        except (ValueError, TypeError):
            raise ValueError(f"chain op {j} ({str(step)[:60]}) is not [op, attrs, refs] of a registry op") from None
        if not isinstance(attrs, dict):
            raise ValueError(f"chain op {j} ({name}): attributes {attrs!r} are not a mapping")
        checked = []
        for r in refs:
            kind = r[0] if isinstance(r, list) and r else None
            if kind == "in" and len(r) == 2 and isinstance(r[1], int) and r[1] >= 0:
                checked.append(("in", r[1]))
            elif kind == "op" and len(r) == 2 and isinstance(r[1], int) and 0 <= r[1] < j:
                checked.append(("op", r[1]))
            elif (kind == "const" and len(r) == 4 and isinstance(r[1], (int, float)) and isinstance(r[2], list)
                  and isinstance(r[3], str)):
                checked.append(("const", float(r[1]), tuple(int(d) for d in r[2]), _dtype(r[3], j, name)))
            else:
                raise ValueError(f"chain op {j} ({name}): bad input reference {r!r} (['in',k], ['op',j<{j}], "
                                 "['const',value,shape,dtype])")
        steps.append((op, {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}, tuple(checked)))
    if not steps or any(not 0 <= j < len(steps) for j in out):
        raise ValueError(f"chain outputs {list(out)} do not name its {len(steps)} ops")
    return Chain(tuple(steps), out)


def _dtype(name: str, j: int, op: str) -> str:
    try:
        return np.dtype(name).name
    except TypeError:
        raise ValueError(f"chain op {j} ({op}): {name!r} is not a dtype") from None


def check(text: str, n_inputs: int, n_outputs: int) -> None:
    """ValueError unless `text` is empty or a chain over `n_inputs` inputs with `n_outputs` outputs."""
    if not text:
        return
    c = decode(text)
    if len(c.out) != n_outputs:
        raise ValueError(f"the chain writes {len(c.out)} outputs, the node has {n_outputs}")
    bad = sorted(k for k in c.inputs_read() if k >= n_inputs)
    if bad:
        raise ValueError(f"the chain reads input {bad[0]}, the node has {n_inputs} inputs")


def write(ctx, text: str, node: Node) -> None:
    """Emit `node`'s chain (its attribute `text`) through `ctx`: each op's own ONNX form, the
    chain's outputs written as the node's outputs."""
    c = decode(text)
    produced: dict[int, str] = {}
    consts: dict[tuple, str] = {}
    target = {j: out for j, out in zip(c.out, node.outputs)}
    for j, (op, attrs, refs) in enumerate(c.steps):
        ins = []
        for r in refs:
            if r[0] == "in":
                ins.append(node.inputs[r[1]])
            elif r[0] == "op":
                ins.append(produced[r[1]])
            else:
                if r[1:] not in consts:
                    consts[r[1:]] = ctx.constant(np.full(r[2], r[1], dtype=r[3]), "scalar")
                    ctx.declare(consts[r[1:]], TensorType(r[2], r[3]))
                ins.append(consts[r[1:]])
        d = opdef(op)
        types = [ctx.type(i) for i in ins]
        full = normalize_attrs(op, attrs, types, where=f"chain op {j} ({op.value})")
        outs = d.infer(types, full)
        if len(outs) != 1:
            raise OnnxError(f"chain op {j} ({op.value}) has {len(outs)} outputs, a chain's ops one")
        name = target.get(j)
        if name is None:
            name = ctx.fresh(op.value)
            ctx.declare(name, outs[0])
        elif ctx.type(name) != outs[0]:
            raise OnnxError(f"chain op {j} ({op.value}) computes {outs[0]}, the output {name!r} is {ctx.type(name)}")
        d.to_onnx(ctx, Node(op, tuple(ins), (name,), full, name=name))
        produced[j] = name
