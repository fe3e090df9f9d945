"""`einsat fuzz --target mutate`: random multi-linear programs through PET's mutation generator.

Each case is a program (a random MLTP, or one of the kinds the grammar has mutants for: convs
with and without dilation, batches, branches, matmul siblings, pools, grouped convs). One round
of the generator runs on it under `SourceIsSlow`, a cost model that prices the source program's
own ops far above anything else, so that nearly every mutant passes the pre-filter and goes
through verification, correction and admission. The check: every e-node of the resulting
e-graph computes its e-class's value on random inputs (`assert_consistent`), so every admitted
union (a corrected mutant put in the subprogram's class) holds numerically.

Importing this module registers the target with the fuzzer (`einsat fuzz` imports it for
`--target mutate`).
"""

from __future__ import annotations

import traceback

from hypothesis import strategies as st

from einsat.cost.model import RooflineCost
from einsat.egraph.rules import Schedule
from einsat.egraph.session import Limits, Session
from einsat.extract.problem import freeze
from einsat.ir.builder import GraphBuilder
from einsat.ir.graph import Graph
from einsat.rewrites.mutate.generate import mutate_generator
from einsat.testing.egraphs import assert_consistent
from einsat.testing.fuzz import TARGETS, Target
from einsat.testing.programs import multilinear_programs

RTOL = 1e-4  # float32 sums taken in other orders (a conv over a wider image, a fix restricted)


class SourceIsSlow(RooflineCost):
    """The H100 roofline, with every op application of `source` 1000 times slower."""

    def __init__(self, source: Graph):
        super().__init__("h100")
        self.slow = {self._key(n.op, n.attrs, *source.node_types(n)) for n in source.nodes}

    @staticmethod
    def _key(op, attrs, ins, outs):
        return op, freeze(dict(attrs)), tuple(t.shape if t is not None else None for t in ins)

    def node_cost(self, op, attrs, ins, outs):
        cost = super().node_cost(op, attrs, ins, outs)
        return cost * 1000 if self._key(op, attrs, ins, outs) in self.slow else cost


@st.composite
def pet_programs(draw) -> Graph:
    """A program of one of the kinds PET's grammar mutates, with small random shapes."""
    kind = draw(st.sampled_from(["conv", "dilated", "branches", "matmuls", "pool", "grouped"]))
    b = GraphBuilder(f"pet_{kind}", seed=draw(st.integers(0, 2**16)))
    n, c, f = draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(3, 9)), draw(st.integers(3, 9))
    if kind == "matmuls":
        x = b.input("x", (draw(st.integers(1, 5)), c + 1))
        k = draw(st.integers(2, 3))
        return b.build(*[b.matmul(x, b.weight(None, (c + 1, f + 1))) for _ in range(k)])
    x = b.input("x", (n, c, h, w))
    if kind == "branches":
        x2 = b.input("x2", (n, c, h, w))
        k1, k2 = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 3]))
        return b.build(b.conv(x, b.weight(None, (f, c, k1, k1)), padding=k1 // 2),
                       b.conv(x2, b.weight(None, (draw(st.integers(1, 3)), c, k2, k2)), padding=k2 // 2))
    if kind == "pool":
        return b.build(b.avgpool(x, kernel=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1)))
    if kind == "grouped":
        x = b.input("x2", (n, 2 * c, h, w))
        return b.build(b.conv(x, b.weight(None, (2 * f, c, 3, 3)), padding=1, groups=2))
    d = 2 if kind == "dilated" else 1
    k = draw(st.sampled_from([1, 3]))
    y = b.conv(x, b.weight(None, (f, c, k, k)), padding=d * (k // 2), dilation=d)
    if draw(st.booleans()):
        y = b.add(y, b.weight(None, (f, 1, 1)))
    return b.build(y)


def cases() -> st.SearchStrategy:
    return st.one_of(pet_programs(), multilinear_programs(max_nodes=3, max_side=6))


def check(graph: Graph) -> str | None:
    """None when every union of one generator round holds numerically (see the module doc)."""
    try:
        s = Session(Limits(time_s=120.0, generator_s=60.0), cost=SourceIsSlow(graph))
        s.add_graph(graph)
        s.run(Schedule((mutate_generator(first_steps=1),)))
        assert_consistent(s.export(), rtol=RTOL, atol=RTOL)
    except AssertionError as e:
        return f"an admitted union does not hold:\n{e}"
    except Exception as e:  # noqa: BLE001  (a generator that crashes on a valid program fails)
        return f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:])
    return None


TARGETS["mutate"] = Target(cases, check)
