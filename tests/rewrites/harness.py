"""A table-driven harness: every rule lists its two sides as ir builders over shared leaves.

    Case("add-comm", leaves, lambda b, t, p: b.add(t["a"], t["c"]), lambda b, t, p: b.add(t["c"], t["a"]))

`leaves` is a hypothesis strategy of `Leaves`: input and weight shapes, attributes and a seed.
Two checks per case:
- soundness: both sides, built as programs over the same leaves, give the same outputs on
  random float64 inputs (`check_sound`, under hypothesis);
- goal: a session holding the left side, run with that rule alone (in its ruleset's settings),
  puts the right side into the left side's e-class; every e-node of the e-graph then computes
  its e-class's value (`check_goal`).

The harness is public, for users checking their own rules: `einsat.testing.rules` (this module
re-exports it for the rule tables here).
"""

from einsat.testing.rules import (  # noqa: F401  (re-exported for the rule tables)
    F64,
    Case,
    Leaves,
    Side,
    check_goal,
    check_sound,
    dims,
    fill,
    leaves,
    parametrize,
    shapes,
)
