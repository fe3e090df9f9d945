"""PET's mutation generator (Algorithms 1–2, §4–§6) as an e-graph generator.

One round:

1. the program: the source program in the first round, later the session's current best
   (`Session.best`), whose new subprograms include what earlier rounds admitted;
2. its next `Limits.subprograms` subprograms not done before (`subprograms.py`);
3. each one's mutants (`grammar.py`), `Limits.mutants` at most, the pre-filter dropping those
   whose core is not cheaper under the session's cost model (`admit.cheaper`);
4. admission (`admit.py`): corrections placed, the corrected program proved equal to the
   subprogram; its fix convs fused with the mutant's (`fusion.py`, a fully equivalent law) as a
   second form;
5. each admitted program enters over the subprogram's e-classes (`Session.add_subgraph`, the
   subprogram's weights bound to their own e-classes) and its outputs are unioned with the
   subprogram's: a `Correct` term, never the mutant alone.

What a subprogram admits depends on its structure, shapes and constants only (weights are
variables to the corrector), so results are memoised by `Subprogram.key`: one verification
serves every layer of one shape. Enumeration is sorted and the corrector's tests are seeded:
the same input gives the same e-graph. Without a cost model (`Session.cost` None) the generator
does nothing: it could not tell a cheaper mutant.

Bounds are work, never the clock: a round verifies at most `Limits.verifications` mutants (the
admission proof is most of its time), and the first round probes with `FIRST_VERIFICATIONS`
of them: the allowance doubles after each round that enters something, up to the limit. A
round the work bound or the session's deadline (the time limit, the run's budget,
`Limits.generator_s` when set) cuts short enters what the subprogram cut short admitted so far,
but that subprogram is neither memoised nor done; a deadline says so in the round's counts
("cut short": the one count the clock decides).

The generator pays its way: an admitted program enters only when the cost model keeps it (it is
cheaper than its subprogram, `admit.cheaper`, its corrections included); one it would never
extract would only grow the e-graph. A round that enters nothing backs off, as egglog's rule
back-off does: after the k-th such round in a row the next 2^k rounds are skipped ("backed off"
in their counts).

The round reports `COUNTS` (`Round.counts`): subprograms taken, mutants generated, verified
(past the pre-filter), corrected (admitted with corrections), fused (with a fused form too),
admitted (programs entered), memo hits, not kept (admitted, not cheaper: left out), cut short,
backed off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import numpy as np

from einsat.egraph.rules import Generator, Round
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType
from einsat.rewrites.mutate.admit import admit, cheaper
from einsat.rewrites.mutate.fusion import fuse
from einsat.rewrites.mutate.grammar import mutants
from einsat.rewrites.mutate.subprograms import Mark, Subprogram, source_program, subprograms
from einsat.verify.corrector import content_key

FIRST_VERIFICATIONS = 2  # the first round's verifications: a probe of whether the generator pays its way
COUNTS = ("subprograms", "mutants", "verified", "corrected", "fused", "admitted", "memo hits", "not kept",
          "cut short", "backed off")


@dataclass
class _Admitted:
    graph: Graph
    binding: dict[str, str]  # weight of `graph` -> the subprogram weight holding the same values
    kept: bool = True        # cheaper than the subprogram under the cost model: extraction may keep it


@dataclass
class _State:
    """What one session's rounds remember."""

    memo: dict[tuple, list[_Admitted]] = field(default_factory=dict)
    done: set[Mark] = field(default_factory=set)
    rounds: int = 0
    fruitless: int = 0  # rounds in a row that entered nothing
    skip: int = 0       # rounds still to skip (back-off)
    allowance: int = 0  # verifications the next round may make (0: not set yet)


_STATES: WeakKeyDictionary = WeakKeyDictionary()


def mutate(session, data) -> Round:
    """One round of the generator (see the module doc)."""
    counts = dict.fromkeys(COUNTS, 0)
    if session.cost is None:
        return Round(0, counts)
    state = _STATES.setdefault(session, _State())
    if state.skip:
        state.skip -= 1
        counts["backed off"] = 1
        return Round(0, counts)
    state.rounds += 1
    if state.rounds == 1 or session.best is None:
        program = source_program(session.sources, data)
    else:
        program = dict(session.best(data))
    lim, unions = session.limits, 0
    allowance = state.allowance or min(FIRST_VERIFICATIONS, lim.verifications)
    for mark, sub in subprograms(program, data, session.cost, lim.subprograms, done=state.done):
        if time.perf_counter() > session.deadline:
            counts["cut short"] = 1
            break
        if counts["verified"] >= allowance:
            break
        counts["subprograms"] += 1
        admitted, complete = state.memo.get(sub.key), True
        if admitted is None:
            admitted, complete = _explore(session, sub, lim.mutants, allowance, counts)
            if complete:
                state.memo[sub.key] = admitted
        else:
            counts["memo hits"] += 1
        if complete:
            state.done.add(mark)
        for a in admitted:
            if not a.kept:
                counts["not kept"] += 1
                continue
            graph, inputs = _entering(sub, a)
            session.add_subgraph(graph, inputs, outputs=sub.outputs)
            unions += len(sub.outputs)
            counts["admitted"] += 1
        if not complete:
            break
    state.fruitless = 0 if unions else state.fruitless + 1
    state.skip = 2 ** state.fruitless if state.fruitless else 0
    state.allowance = min(2 * allowance, lim.verifications) if unions else allowance
    return Round(unions, counts)


def _explore(session, sub: Subprogram, limit: int, verifications: int,
             counts: dict[str, int]) -> tuple[list[_Admitted], bool]:
    """The admitted mutants of `sub`, and whether all were tried (within the round's
    `verifications` and before the deadline)."""
    out = []
    for m in mutants(sub.graph)[:limit]:
        if time.perf_counter() > session.deadline:
            counts["cut short"] = 1
            return out, False
        if counts["verified"] >= verifications:
            return out, False
        counts["mutants"] += 1
        if not cheaper(session.cost, sub.graph, m.graph):
            continue
        counts["verified"] += 1
        verdict = admit(sub.graph, m.graph)
        if verdict.graph is not None:
            counts["corrected"] += verdict.corrected
            out.append(_Admitted(verdict.graph, _binding(sub.graph, verdict.graph),
                                 cheaper(session.cost, sub.graph, verdict.graph)))
            fused = fuse(verdict.graph)
            if fused is not verdict.graph:
                counts["fused"] += 1
                out.append(_Admitted(fused, out[-1].binding, cheaper(session.cost, sub.graph, fused)))
    return out, True


def _binding(original: Graph, fixed: Graph) -> dict[str, str]:
    """Weights of `fixed` holding the values of a weight of `original` (the corrector's copies)."""
    by_content = {content_key(np.asarray(a)): w for w, a in original.weights.items()}
    found = {w: by_content.get(content_key(np.asarray(a))) for w, a in fixed.weights.items()}
    return {w: o for w, o in found.items() if o is not None}


def _entering(sub: Subprogram, a: _Admitted) -> tuple[Graph, dict[str, int]]:
    """The admitted graph with the subprogram's weights as inputs bound to their e-classes."""
    g = a.graph
    bound = {w: TensorType.of(np.asarray(g.weights[w])) for w in a.binding}
    graph = Graph(g.nodes, {**g.input_types(), **bound}, g.outputs,
                  {w: v for w, v in g.weights.items() if w not in a.binding}, name=g.name)
    inputs = {**sub.inputs, **{w: sub.weights[o] for w, o in a.binding.items()}}
    return graph, inputs


def mutate_generator(every: int = 1, first_steps: int | None = 4) -> Generator:
    """PET's rounds: by default in the first 4 steps (PET's r = 4 rounds, §8.1)."""
    return Generator("pet-mutate", "S = Correct(M, fix, region) for a mutant M of a subprogram S "
                     "(PET: find_differences, then correct)", mutate, every, first_steps)
