"""Kernel launches, the metric of TensorSSA's Figure 6, counted while a program runs.

A kernel is what a GPU runtime would launch. The counts are dynamic: a loop body's kernels count
once per iteration, a branch's when it is taken. A functional graph's count is computed from how
often each of its graphs ran, which the runtime observes (frontend sits before `ir` and cannot
run a graph itself):

    count_graph(einsat.runtime.graph_runs(graph, inputs), fused=True)

The models:

  imperative program (the traced function as it ran eagerly)
    eager     every op and every in-place update is a kernel; views are free, and an in-place
              element-wise op (`v += 1`: the op, then its write-back) is one kernel
    naive     every op, every view (materialized) and every in-place update is a kernel
    fused     TorchScript + NNC-like: element-wise and layout ops fuse, but an in-place update is
              a barrier no fusion crosses (and a kernel of its own)
  functional graph (after functionalization)
    nodes     every node is a kernel (but constants, identities that only name an output, and
              the loop/if nodes themselves)
    fused     vertical fusion: element-wise, layout, access and assign nodes fuse into one kernel
              when connected and no non-fusible node (matmul, reduction, loop) lies between them

Fusion groups are formed by levels: a fusible node's level is the largest number of non-fusible
nodes on a path reaching it; connected fusible nodes of one level share a kernel. Grouping by
level never creates a cycle between kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from einsat.frontend.evaluate import run_program
from einsat.frontend.program import Block, IfStmt, LoopStmt, MutateStmt, OpStmt, Program, ViewStmt
from einsat.ir.graph import Graph
from einsat.ir.groups import CONTROL, FREE  # FREE: sources, and identity, which only names a value
from einsat.ir.registry import Op, opdef


def fusible(op: Op) -> bool:
    d = opdef(op)
    return op not in CONTROL and (d.elementwise or d.layout_only)


def fusion_kernels(items: list[tuple[bool, int, list[int]]]) -> int:
    """Kernels of a DAG of (fusible, launches, deps) items in topological order, fused by levels."""
    level, parent = [], list(range(len(items)))

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for k, (fuse, _, deps) in enumerate(items):
        lv = max((level[d] + (0 if items[d][0] else 1) for d in deps), default=0)
        level.append(lv)
        if fuse:
            for d in deps:
                if items[d][0] and level[d] == lv:
                    parent[find(d)] = find(k)
    groups = {find(k) for k, (fuse, n, _) in enumerate(items) if fuse and n}
    return len(groups) + sum(n for fuse, n, _ in items if not fuse)


# -- functional graphs ----------------------------------------------------------------------------
def graph_kernels(graph: Graph, fused: bool) -> int:
    """Kernels of one execution of the graph's own nodes (bodies not included)."""
    if not fused:
        return sum(1 for n in graph.nodes if n.op not in FREE and n.op not in CONTROL)
    index = {o: k for k, n in enumerate(graph.nodes) for o in n.outputs}
    items = [(fusible(n.op), 0 if n.op in FREE or n.op in CONTROL else 1,
              sorted({index[i] for i in n.inputs if i in index})) for n in graph.nodes]
    return fusion_kernels(items)


def count_graph(runs: Mapping[Graph, int], fused: bool) -> int:
    """Kernel launches of a run of a graph, from how many times each of its graphs (the program,
    its bodies) ran: `einsat.runtime.GraphRuns.counts`."""
    return sum(graph_kernels(graph, fused) * n for graph, n in runs.items())


# -- imperative programs --------------------------------------------------------------------------
def block_kernels(block: Block, mode: str, uses: Counter) -> int:
    """Kernels of one execution of a block's own statements under `mode` (eager/naive/fused)."""
    total, items, where, base = 0, [], {}, {}
    prev = None
    for s in block.stmts:
        if isinstance(s, OpStmt):
            if mode == "fused":
                deps = sorted({where[base.get(i, i)] for i in s.inputs if base.get(i, i) in where})
                items.append((fusible(s.op), 1, deps))
                for o in s.outputs:
                    where[o] = len(items) - 1
            else:
                total += 1
        elif isinstance(s, ViewStmt):
            base[s.out] = base.get(s.base, s.base)
            total += mode == "naive"
        elif isinstance(s, MutateStmt):
            in_place = (mode == "eager" and isinstance(prev, OpStmt) and s.source in prev.outputs
                        and uses[s.source] == 1 and opdef(prev.op).elementwise)
            total += 0 if in_place else 1
            if mode == "fused":  # a barrier: nothing fuses across it
                total += fusion_kernels(items)
                items, where = [], {}
        elif isinstance(s, (LoopStmt, IfStmt)) and mode == "fused":
            total += fusion_kernels(items)
            items, where = [], {}
        prev = s
    return total + (fusion_kernels(items) if mode == "fused" else 0)


def count_program(program: Program, inputs: Mapping[str, np.ndarray], mode: str) -> int:
    """Kernel launches of one run of the traced (imperative) program under `mode`."""
    _, runs = run_program(program, inputs)
    uses: Counter = Counter()
    blocks = [program.body]
    for s, _ in program.walk():
        uses.update(i for i in getattr(s, "inputs", ()) if i)
        if isinstance(s, (LoopStmt, IfStmt)):
            blocks.extend(s.blocks)
            for b in s.blocks:
                uses.update(b.returns)
    uses.update(program.outputs)
    return sum(block_kernels(b, mode, uses) * runs[id(b)] for b in blocks)

