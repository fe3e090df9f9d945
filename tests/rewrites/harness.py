"""A table-driven harness: every rule lists its two sides as ir builders over shared leaves.

    Case("add-comm", leaves, lambda b, t, p: b.add(t["a"], t["c"]), lambda b, t, p: b.add(t["c"], t["a"]))

`leaves` is a hypothesis strategy of `Leaves`: input and weight shapes, attributes and a seed.
Two checks per case:
- soundness: both sides, built as programs over the same leaves, give the same outputs on
  random float64 inputs (`check_sound`, under hypothesis);
- goal: a session holding the left side, run with that rule alone (in its ruleset's settings),
  puts the right side into the left side's e-class; every e-node of the e-graph then computes
  its e-class's value (`check_goal`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from einsat import GraphBuilder
from einsat.egraph import Limits, Schedule, Session
from einsat.rewrites.schedule import default_rulesets
from tests.egraph.checks import assert_consistent, same_outputs

F64 = np.float64


@dataclass(frozen=True)
class Leaves:
    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    weights: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def build(self, b: GraphBuilder) -> dict:
        rng = np.random.default_rng(self.seed)
        t = {n: b.input(n, s, F64) for n, s in self.inputs.items()}
        for n, s in self.weights.items():
            a = rng.standard_normal(s)
            if n.startswith("var"):  # variances and divisors stay away from zero
                a = np.abs(a) + 0.5
            t[n] = b.weight(n, a.astype(F64))
        return t

    def __getitem__(self, key):
        return self.attrs[key]


Side = Callable[[GraphBuilder, dict, Leaves], Any]


@dataclass(frozen=True)
class Case:
    rule: str
    leaves: st.SearchStrategy
    lhs: Side
    rhs: Side
    steps: int = 2          # saturation steps the goal needs
    also: tuple[str, ...] = ()  # other rules the goal needs (by name)
    variant: str = ""       # a second case of one rule (its other form)

    def program(self, side: Side, p: Leaves, name: str):
        """The side as a program; a side may return a tuple of values (outputs out0, out1, ...)."""
        b = GraphBuilder(name)
        out = side(b, p.build(b), p)
        outs = out if isinstance(out, tuple) else (out,)
        return b.build(*outs, names=[f"out{k}" for k in range(len(outs))])

    def __repr__(self) -> str:
        return self.rule + (f"[{self.variant}]" if self.variant else "")


def leaves(inputs=None, weights=None, **attrs) -> st.SearchStrategy:
    """A strategy of Leaves from strategies (or values) of shapes and attributes."""
    def strat(v):
        return v if isinstance(v, st.SearchStrategy) else st.just(v)
    return st.builds(lambda i, w, a, s: Leaves(i, w, a, s),
                     st.fixed_dictionaries({k: strat(v) for k, v in (inputs or {}).items()}),
                     st.fixed_dictionaries({k: strat(v) for k, v in (weights or {}).items()}),
                     st.fixed_dictionaries({k: strat(v) for k, v in attrs.items()}),
                     st.integers(0, 2 ** 16))


def dims(lo: int = 1, hi: int = 4) -> st.SearchStrategy:
    return st.integers(lo, hi)


def shapes(min_rank: int = 1, max_rank: int = 3, lo: int = 1, hi: int = 4) -> st.SearchStrategy:
    return st.lists(dims(lo, hi), min_size=min_rank, max_size=max_rank).map(tuple)


def _rules_by_name() -> dict:
    out = {}
    for rs in default_rulesets():
        for r in rs.rules:
            out[r.name] = (rs, r)
    return out


def check_sound(case: Case, p: Leaves, rtol: float = 1e-9) -> None:
    lhs, rhs = case.program(case.lhs, p, "lhs"), case.program(case.rhs, p, "rhs")
    same_outputs(lhs, rhs, seed=p.seed, rtol=rtol, atol=rtol)


def check_goal(case: Case, p: Leaves) -> Session:
    rules = _rules_by_name()
    rs, rule = rules[case.rule]
    extra = tuple(rules[n][1] for n in case.also)
    one = replace(rs, name=f"only_{rs.name}", rules=(rule,) + extra, first_steps=None)
    s = Session(Limits(iterations=case.steps, nodes=20_000, time_s=60))
    lhs = s.add_graph(case.program(case.lhs, p, "lhs"))
    report = s.run(Schedule((one,)))
    assert report.rules.get(case.rule) and report.rules[case.rule].matches > 0, f"{case.rule} never matched"
    rhs = s.add_graph(case.program(case.rhs, p, "rhs"), root=False)
    for k, (left, right) in enumerate(zip(lhs, rhs, strict=True)):
        assert s.equivalent(left, right), f"{case.rule}: the right side's out{k} is not in the left side's e-class"
    assert_consistent(s.export(), seed=p.seed, rtol=1e-8, atol=1e-8)
    return s


def parametrize(cases: list[Case]):
    """The two tests of a theory's table: soundness under hypothesis, goal on two examples."""
    import pytest
    from hypothesis import given, settings

    ids = [repr(c) for c in cases]

    @pytest.mark.parametrize("case", cases, ids=ids)
    @given(data=st.data())
    def test_sound(case, data):
        check_sound(case, data.draw(case.leaves))

    @pytest.mark.parametrize("case", cases, ids=ids)
    @settings(max_examples=2)
    @given(data=st.data())
    def test_goal(case, data):
        check_goal(case, data.draw(case.leaves))

    return test_sound, test_goal


def fill(b: GraphBuilder, value: float, shape=(), dtype=F64):
    """A constant-filled weight, named as the e-graph names a `Fill` leaf (so it is one)."""
    from einsat.egraph.encoding import fill_name
    return b.weight(fill_name(float(value), tuple(shape), np.dtype(dtype).name), np.full(shape, value, dtype))
