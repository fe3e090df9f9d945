"""Checking a rewrite rule: its two sides as programs on random inputs, and in an e-graph.

A `Case` states a rule by example: a hypothesis strategy of `Leaves` (input and weight shapes,
attributes, a seed) and the rule's two sides as builder functions over those leaves.

    from einsat.testing.rules import Case, leaves, shapes, assert_sound, check_goal

    case = Case("exp-mul", leaves({"a": (2, 3), "b": (2, 3)}),
                lambda b, t, p: b.mul(b.exp(t["a"]), b.exp(t["b"])),
                lambda b, t, p: b.exp(b.add(t["a"], t["b"])))
    assert_sound(case)                    # hypothesis draws leaves; both sides agree on NumPy
    check_goal(case, example, [ruleset])  # the rule alone puts the right side in the left's e-class

- soundness (`check_sound`): both sides, built as programs over the same leaves, give the same
  outputs on random float64 inputs; `assert_sound` runs it under hypothesis, which shrinks a
  counterexample to small shapes;
- goal (`check_goal`): a session holding the left side, run with that rule alone (in its
  ruleset's settings, plus the rules in `Case.also`), puts the right side into the left side's
  e-class, and every e-node of the e-graph then computes its e-class's value.

`parametrize(cases)` makes the two pytest tests of a table of cases (einsat's own rule tests,
`tests/rewrites/`, are such tables).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st

from einsat.egraph import Limits, Ruleset, SaturationReport, Schedule, Session
from einsat.ir.builder import GraphBuilder
from einsat.ir.graph import Graph
from einsat.testing.egraphs import assert_consistent, same_outputs

F64 = np.float64


@dataclass(frozen=True)
class Leaves:
    """Input and weight shapes (float64), attributes, and the seed of the weights and inputs."""

    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    weights: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def build(self, b: GraphBuilder) -> dict:
        """The leaves as builder tensors, by name; weights named `var*` stay away from zero."""
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
    """One rule by example: `lhs` and `rhs` build its two sides from `(builder, leaves by name, Leaves)`."""

    rule: str
    leaves: st.SearchStrategy
    lhs: Side
    rhs: Side
    steps: int = 2              # saturation steps the goal needs
    also: tuple[str, ...] = ()  # other rules the goal needs (by name)
    variant: str = ""           # a second case of one rule (its other form)

    def program(self, side: Side, p: Leaves, name: str) -> Graph:
        """The side as a program; a side may return a tuple of values (outputs out0, out1, ...)."""
        b = GraphBuilder(name)
        out = side(b, p.build(b), p)
        outs = out if isinstance(out, tuple) else (out,)
        return b.build(*outs, names=[f"out{k}" for k in range(len(outs))])

    def __repr__(self) -> str:
        return self.rule + (f"[{self.variant}]" if self.variant else "")


def leaves(inputs=None, weights=None, **attrs) -> st.SearchStrategy:
    """A strategy of Leaves from strategies (or plain values) of shapes and attributes."""
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


def fill(b: GraphBuilder, value: float, shape=(), dtype=F64):
    """A constant-filled weight, named as the e-graph names a `Fill` leaf (so it is one)."""
    from einsat.egraph.encoding import fill_name
    return b.weight(fill_name(float(value), tuple(shape), np.dtype(dtype).name), np.full(shape, value, dtype))


def check_sound(case: Case, p: Leaves, rtol: float = 1e-9) -> None:
    """Both sides over the leaves `p` give the same outputs (AssertionError naming the rule if not)."""
    lhs, rhs = case.program(case.lhs, p, "lhs"), case.program(case.rhs, p, "rhs")
    if len(lhs.outputs) != len(rhs.outputs):
        raise AssertionError(f"{case!r}: the left side has {len(lhs.outputs)} outputs, the right {len(rhs.outputs)}")
    for a, b in zip(lhs.outputs, rhs.outputs):
        if lhs.types[a].shape != rhs.types[b].shape:
            raise AssertionError(f"{case!r}: {a} is {lhs.types[a]} on the left, {rhs.types[b]} on the right ({p})")
    try:
        same_outputs(lhs, rhs, seed=p.seed, rtol=rtol, atol=rtol)
    except AssertionError as e:
        raise AssertionError(f"{case!r} is unsound on {p}:\n{e}") from None


def assert_sound(case: Case, rtol: float = 1e-9, **settings) -> None:
    """`check_sound` on leaves drawn by hypothesis (the active settings profile, updated by
    `settings`, e.g. `max_examples=50`; no deadline unless given); a failure is shrunk and re-raised."""
    from hypothesis import given
    from hypothesis import settings as hsettings

    settings.setdefault("deadline", None)

    @hsettings(**settings)
    @given(case.leaves)
    def sound(p):
        check_sound(case, p, rtol)

    sound()


class Goal(NamedTuple):
    session: Session
    report: SaturationReport


def _by_name(rulesets: Iterable[Ruleset]) -> dict:
    out = {}
    for rs in rulesets:
        for r in rs.rules:
            out.setdefault(r.name, (rs, r))
    return out


def check_goal(case: Case, p: Leaves, rulesets: Iterable[Ruleset] | None = None,
               rtol: float = 1e-8) -> Goal:
    """The rule `case.rule` alone (found in `rulesets`, default: einsat's default rulesets; with
    the rules named in `case.also`), run `case.steps` steps on the left side, matches at least
    once and puts the right side into the left side's e-class; the e-graph stays consistent."""
    if rulesets is None:
        from einsat.rewrites.schedule import default_rulesets
        rulesets = default_rulesets()
    rules = _by_name(rulesets)
    if case.rule not in rules:
        raise KeyError(f"rule {case.rule!r} is in none of the rulesets given")
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
    assert_consistent(s.export(), seed=p.seed, rtol=rtol, atol=rtol)
    return Goal(s, report)


def parametrize(cases: list[Case], rulesets: Iterable[Ruleset] | None = None):
    """The two pytest tests of a table of cases: soundness under hypothesis, the goal on two examples."""
    import pytest
    from hypothesis import given, settings

    ids = [repr(c) for c in cases]
    sets = None if rulesets is None else tuple(rulesets)

    @pytest.mark.parametrize("case", cases, ids=ids)
    @given(data=st.data())
    def test_sound(case, data):
        check_sound(case, data.draw(case.leaves))

    @pytest.mark.parametrize("case", cases, ids=ids)
    @settings(max_examples=2)
    @given(data=st.data())
    def test_goal(case, data):
        check_goal(case, data.draw(case.leaves), sets)

    return test_sound, test_goal
