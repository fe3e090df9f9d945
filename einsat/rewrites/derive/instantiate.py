"""Expression instantiation (EinNet §5): a derived state as an `ir.Graph` of operators and eOperators.

Scopes are instantiated from the leaves up. A compute-intensive scope (arithmetic intensity at
least `measure.MEMORY_BOUND`) must match an operator (`match.matches`, the best one): its
operands are laid out (a view, a transpose, or an input-layout eOperator, eqs. 2–3), the
operator runs, and its output is reshaped so that each of the scope's iterators has an axis of
its own. A memory-bound scope becomes an eOperator (§5.2), or a transpose when it only permutes
a tensor. The reader of a scope then reads that tensor, its subscripts permuted to the axes.
The root's output is transposed to its traversal order at the end if it is not in it already.

The graph's inputs are `in0`, `in1`, ... (the expression's inputs); it has one output.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from einsat.errors import EinsatError
from einsat.ir.builder import GraphBuilder, Tensor
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.nodes import Expr, Iter, Read, inputs_used, map_reads, relabel_inputs, scopes
from einsat.ir.expr.printer import fingerprint
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType
from einsat.rewrites.derive.layouts import Layout, group
from einsat.rewrites.derive.match import Match, matches


class NotInstantiable(EinsatError):
    """A compute-intensive scope matches no operator."""


MAX_VARIANTS = 6


def instantiate(root: Expr, types: Sequence[TensorType], const: frozenset[int] = frozenset(),
                name: str = "derived") -> Graph:
    """The graph computing `root` over inputs of `types` (`const`: positions holding weights),
    each compute-intensive scope as its best operator."""
    return _Instance(types, const, name, {}).graph(root)


def instantiations(root: Expr, types: Sequence[TensorType], const: frozenset[int] = frozenset(),
                   name: str = "derived") -> list[Graph]:
    """The graphs computing `root`: the best operator for every compute-intensive scope, then
    each other operator of one scope in turn (at most `MAX_VARIANTS` graphs)."""
    first = _Instance(types, const, name, {})
    out = [first.graph(root)]
    for scope_no, count in enumerate(first.options):
        for choice in range(1, count):
            if len(out) < MAX_VARIANTS:
                out.append(_Instance(types, const, name, {scope_no: choice}).graph(root))
    return out


class _Instance:
    def __init__(self, types: Sequence[TensorType], const: frozenset[int], name: str, choice: dict[int, int]):
        self.choice = choice
        self.options: list[int] = []  # how many operators each compute-intensive scope had, in order
        self.b = GraphBuilder(name)
        self.dtype = types[0].dtype
        self.tensors: list[Tensor] = [self.b.input(f"in{k}", t.shape, t.dtype) for k, t in enumerate(types)]
        self.const = set(const)
        self.done: dict[Expr, tuple[Tensor, tuple[Iter, ...]]] = {}

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [t.shape for t in self.tensors]

    def graph(self, root: Expr) -> Graph:
        value, its = self.scope(root)
        order = [next(k for k, it in enumerate(its) if it.name == loop.name) for loop in root.loops]
        if order != sorted(order):
            value = self.b.transpose(value, perm=tuple(order))
        if value.shape != root.shape:
            value = self.b.reshape(value, shape=root.shape)
        return self.b.build(value)

    def scope(self, s: Expr) -> tuple[Tensor, tuple[Iter, ...]]:
        """The tensor of scope `s` and, per axis, the iterator whose coordinate (minus its low)
        the axis holds."""
        if s in self.done:
            return self.done[s]
        flat = s
        for child in scopes(s):
            value, its = self.scope(child)
            k = self.add(value, all(i in self.const for i in inputs_used(child)))
            flat = flat.with_body(map_reads(flat.body, _reader(child, k, its)))
        result = self.operator(flat) if not is_memory_bound(flat, self.shapes) else self.memory_bound(flat)
        self.done[s] = result
        return result

    def add(self, value: Tensor, const: bool) -> int:
        self.tensors.append(value)
        if const:
            self.const.add(len(self.tensors) - 1)
        return len(self.tensors) - 1

    # -- compute-intensive scopes: operators ------------------------------------------------
    def operator(self, s: Expr) -> tuple[Tensor, tuple[Iter, ...]]:
        options = matches(s, self.shapes, frozenset(self.const))
        if not options:
            raise NotInstantiable(f"no operator computes the compute-intensive scope {fingerprint(s)[:200]}")
        self.options.append(len(options))
        m: Match = options[min(self.choice.get(len(self.options) - 1, 0), len(options) - 1)]
        args = [self.layout(lay) for lay in m.operands]
        out = self.b.op(m.op, *args, **m.attrs)
        if m.scale != 1.0:
            out = self.b.mul(out, self.b.const(np.asarray(m.scale, self.dtype), dtype=self.dtype))
        if m.crop:
            out = self.b.slice(out, starts=(0,) * len(m.crop), ends=m.crop)
        its = tuple(it for ax in m.out for it in ax.iters)
        shape = tuple(it.size for it in its)
        if out.shape != shape:
            out = self.b.reshape(out, shape=shape)
        return out, its

    def layout(self, lay: Layout) -> Tensor:
        """An operand in the operator's layout: a view, a transpose, or an eOperator."""
        src = self.tensors[lay.src]
        perm = lay.permutation(src.shape)
        if perm is not None:
            t = src if perm == tuple(range(len(perm))) else self.b.transpose(src, perm=perm)
        else:
            t = self.b.eop(src, expr=fingerprint(lay.expression()))
        return t if t.shape == lay.shape else self.b.reshape(t, shape=lay.shape)

    # -- memory-bound scopes: eOperators ----------------------------------------------------
    def memory_bound(self, s: Expr) -> tuple[Tensor, tuple[Iter, ...]]:
        b = s.body
        if not s.sums and isinstance(b, Read) and isinstance(b.src, int):
            lay = Layout(b.src, b.idx, tuple(group([it]) for it in s.loops))
            perm = lay.permutation(self.shapes[b.src])
            if perm is not None:  # a permutation of a tensor: a transpose (axis j holds loop j)
                src = self.tensors[b.src]
                return (src if perm == tuple(range(len(perm))) else self.b.transpose(src, perm=perm)), s.loops
        used = sorted(inputs_used(s))
        e = relabel_inputs(s, {k: j for j, k in enumerate(used)})
        return self.b.eop(*[self.tensors[k] for k in used], expr=fingerprint(e)), s.loops


def _reader(child: Expr, k: int, its: tuple[Iter, ...]):
    """Rewrite reads of `child` into reads of input k, whose axis j holds iterator its[j]."""
    pos = {it.name: j for j, it in enumerate(child.loops)}

    def read(r: Read):
        if r.src != child:
            return r
        return Read(k, tuple(r.idx[pos[it.name]] - it.lo for it in its))
    return read
