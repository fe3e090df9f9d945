"""The imperative program a trace records, and its TensorSSA rewrites (TensorSSA §2.2, §3).

This is the graph-level IR of the paper (TorchScript-like): statements in nested blocks, each
value named once, but *mutable*: a `View` shares its base's storage and a `Mutate` overwrites a
value's data in place (and so every alias of it). Functionalization rewrites it step by step:

    View(v, x, spec)         ->  Access(v, x, spec)               (the immutable view)
    Mutate(v, w)             ->  Assign chain up to the base, Access chain down to every live
                                 view, Update annotations (Algorithm 1, RewriteMutation)
    Update(new, old)         ->  block arguments and returns (BlockPropagation), then renaming

A `Loop` body takes (i, *carried) as parameters and returns the new carried values; an `If` has
two blocks returning values of the same types. Blocks read outer values directly (closures).
Every statement keeps the user's source line it came from, for error messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from einsat.ir.registry import Op
from einsat.ir.types import TensorType


@dataclass
class OpStmt:
    """outs = op(ins; attrs): a pure computation into fresh storage."""

    op: Op
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    line: str = ""


@dataclass
class _ViewOf:
    """out = base[spec] (`spec`: view steps of `einsat.ir.ops.views`, usually one; a dselect
    reads its index from `dyn`). The fields `ViewStmt` and `AccessStmt` share; neither is an
    instance of the other."""

    out: str
    base: str
    spec: tuple
    dyn: list[str] = field(default_factory=list)
    line: str = ""

    @property
    def inputs(self) -> list[str]:
        return [self.base, *self.dyn]


@dataclass
class ViewStmt(_ViewOf):
    """out <- base[spec]: `out` shares `base`'s storage."""


@dataclass
class MutateStmt:
    """target's data := source (same shape and dtype): an in-place update."""

    target: str
    source: str
    line: str = ""

    @property
    def inputs(self) -> list[str]:
        return [self.target, self.source]


@dataclass
class AccessStmt(_ViewOf):
    """out = base[spec] into fresh storage: the immutable view (TensorSSA's Access)."""


@dataclass
class AssignStmt:
    out: str
    base: str
    source: str
    spec: tuple
    dyn: list[str] = field(default_factory=list)
    line: str = ""

    @property
    def inputs(self) -> list[str]:
        return [self.base, self.source, *self.dyn]


@dataclass
class UpdateStmt:
    """Annotation: from here on, uses of `old` mean `new` (TensorSSA's Update(new, old))."""

    new: str
    old: str


@dataclass
class Block:
    params: list[str] = field(default_factory=list)
    stmts: list = field(default_factory=list)
    returns: list[str] = field(default_factory=list)


@dataclass
class LoopStmt:
    """outputs = loop(trip, inits): body params (i, *carried), returns the new carried values."""

    trip: str
    inits: list[str]
    outputs: list[str]
    body: Block
    line: str = ""

    @property
    def inputs(self) -> list[str]:
        return [self.trip, *self.inits]

    @property
    def blocks(self) -> list[Block]:
        return [self.body]


@dataclass
class IfStmt:
    cond: str
    outputs: list[str]
    then: Block
    other: Block
    line: str = ""

    @property
    def inputs(self) -> list[str]:
        return [self.cond]

    @property
    def blocks(self) -> list[Block]:
        return [self.then, self.other]


CONTROL = (LoopStmt, IfStmt)


def defined(stmt) -> list[str]:
    """The values a statement defines."""
    if isinstance(stmt, (OpStmt, LoopStmt, IfStmt)):
        return list(stmt.outputs)
    if isinstance(stmt, (ViewStmt, AccessStmt, AssignStmt)):
        return [stmt.out]
    if isinstance(stmt, UpdateStmt):
        return [stmt.new]
    return []


@dataclass
class Program:
    """A traced function: inputs, the top-level block, outputs, value types, constants."""

    name: str
    inputs: list[str]
    body: Block
    outputs: list[str]
    types: dict[str, TensorType]
    constants: dict[str, np.ndarray]
    output_names: list[str] = field(default_factory=list)  # what the user calls each output
    aliased: set[str] = field(default_factory=set)  # loop/if outputs aliasing outer storage

    def walk(self, block: Block | None = None, depth: int = 0) -> Iterator[tuple[Any, int]]:
        """Every statement, in program order, with its block nesting depth."""
        for stmt in (block or self.body).stmts:
            yield stmt, depth
            for b in getattr(stmt, "blocks", ()):
                yield from self.walk(b, depth + 1)

    def __str__(self) -> str:
        lines = [f"def {self.name}({', '.join(self.inputs)}):"]
        _format_block(self.body, lines, 1, self.types)
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)


def _format_block(block: Block, lines: list[str], depth: int, types) -> None:
    pad = "  " * depth
    for s in block.stmts:
        if isinstance(s, OpStmt):
            args = ", ".join(s.inputs) + "".join(f", {k}={v}" for k, v in s.attrs.items() if k != "value")
            lines.append(f"{pad}{', '.join(s.outputs)} = {s.op.value}({args})")
        elif isinstance(s, ViewStmt):
            lines.append(f"{pad}{s.out} = view({', '.join(s.inputs)}, {list(s.spec)})")
        elif isinstance(s, MutateStmt):
            lines.append(f"{pad}mutate({s.target}, {s.source})")
        elif isinstance(s, AccessStmt):
            lines.append(f"{pad}{s.out} = access({', '.join(s.inputs)}, {list(s.spec)})")
        elif isinstance(s, AssignStmt):
            lines.append(f"{pad}{s.out} = assign({', '.join(s.inputs)}, {list(s.spec)})")
        elif isinstance(s, UpdateStmt):
            lines.append(f"{pad}update({s.new}, {s.old})")
        elif isinstance(s, LoopStmt):
            lines.append(f"{pad}{', '.join(s.outputs) or '()'} = loop({', '.join(s.inputs)}):")
            lines.append(f"{pad}  block({', '.join(s.body.params)}):")
            _format_block(s.body, lines, depth + 2, types)
            lines.append(f"{pad}    -> ({', '.join(s.body.returns)})")
        elif isinstance(s, IfStmt):
            lines.append(f"{pad}{', '.join(s.outputs) or '()'} = if({s.cond}):")
            for label, b in (("then", s.then), ("else", s.other)):
                lines.append(f"{pad}  {label}:")
                _format_block(b, lines, depth + 2, types)
                lines.append(f"{pad}    -> ({', '.join(b.returns)})")
