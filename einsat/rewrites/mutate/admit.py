"""Admission: a mutant enters the e-graph only as a corrected program proved equal to the original.

The e-graph's invariant (docs/architecture.md): every e-class stays fully equivalent. For a subprogram S and a mutant M:

1. pre-filter (no verification yet): M's core, its ops that compute (views and copies left
   out: post-optimization cancels most of them), must be cheaper than S under the cost model;
   the whole of M under a model whose target runs views as kernels (`CostModel.views_run`);
2. `correct_placed(S, M)`: `find_differences` on each value of M's output view chain, the
   corrections placed where the regions are fewest (`einsat.verify.placement`);
3. a fix that recomputes as much as the whole of S is refused (a region the restriction could
   not narrow: correcting it costs more than S itself);
4. the corrected program F is checked again: `find_differences(S, F)` must find no difference.

Only F enters (`generate.py`), never M alone; an M equivalent to S enters without a `Correct`.
The proofs run with BLAS at one thread (`blas.one_thread`: their field products are small, and
OpenBLAS's threads on a busy machine made them 5-7x slower).
"""

from __future__ import annotations

from dataclasses import dataclass

from einsat.errors import EinsatError
from einsat.ir.graph import Graph
from einsat.ir.groups import NOT_COMPUTING
from einsat.rewrites.mutate.blas import one_thread
from einsat.verify.corrector import find_differences
from einsat.verify.placement import correct_placed

NOT_CORE = NOT_COMPUTING  # sources and layout-only ops: what a mutant's core never is (the registry's facts)


@dataclass(frozen=True)
class Verdict:
    graph: Graph | None  # the corrected mutant, None when refused
    corrected: bool      # it needed corrections (M was partially equivalent)
    reason: str = ""     # why it was refused


def graph_cost(cost, graph: Graph, core: bool = False) -> float:
    """`graph`'s cost under `cost` (a cost model); with `core`, its computing ops only."""
    total = 0.0
    for node in graph.nodes:
        if core and node.op in NOT_CORE:
            continue
        total += cost.node_cost(node.op, node.attrs, *graph.node_types(node))
    return total


def cheaper(cost, original: Graph, mutant: Graph) -> bool:
    """The pre-filter: the mutant's core is cheaper than the whole original; the whole mutant,
    views included, under a model whose target runs views as kernels (`CostModel.views_run`:
    on onnxruntime a mutant's reshapes and transposes are copies that cost what they cost; its
    measured profile also told a reshaped Add 20-45% "cheaper" than the same Add by noise alone,
    and the views alone never are).

    A committed profile's model whose price of a convolution on either side is a guess (its
    nearest measured neighbour's time, `MeasuredCost.guessed`) compares the two by its
    calibrated roofline instead: PET's gain is a measured algorithm switch, and two neighbours'
    times are no measurement of one. (EfficientNet's 1x1 convolution of [1, 32, 112, 112],
    unmeasured on the H100, was guessed at 43.6 µs and its 16 tiles at 9.7 µs from different
    neighbours: the mutant wrote 4 Reshapes and 2 Transposes per convolution and its file ran
    0.90x on onnxruntime CPU; the roofline prices the two alike.)"""
    guessed = getattr(cost, "guessed", None)
    if guessed is not None and getattr(cost, "fallback", None) is not None and (guessed(original) or guessed(mutant)):
        cost = cost.fallback
    return graph_cost(cost, mutant, core=not getattr(cost, "views_run", False)) < graph_cost(cost, original)


def admit(original: Graph, mutant: Graph) -> Verdict:
    """The corrected mutant, proved equal to `original` (see the module doc), or why not."""
    with one_thread():
        return _admit(original, mutant)


def _admit(original: Graph, mutant: Graph) -> Verdict:
    try:
        placed = correct_placed(original, mutant)
        fixed = placed.graph
        fix = fixed.flops() - mutant.flops()
        if fix >= original.flops() > 0:
            return Verdict(None, True, "the fix recomputes the whole original")
        again = find_differences(original, fixed)
    except EinsatError as e:  # an op without field semantics, a region the corrector cannot cover
        return Verdict(None, False, f"{type(e).__name__}: {e}")
    if not again.equivalent:
        return Verdict(None, True, "the corrected mutant still differs:\n" + str(again))
    return Verdict(fixed, not placed.differences.equivalent)
