"""The e-graph: egglog encoding of programs, shape analysis, bounded saturation, export.

`Session` is the entry point (see `einsat.egraph.session`); `EGraphData` is what it exports.
"""

from einsat.egraph.data import ABSENT, EClass, EGraphData, ENode
from einsat.egraph.patterns import pat
from einsat.egraph.rules import BackOff, Generator, Rule, Ruleset, Schedule

# The egglog-backed parts load on first use, so that `einsat.egraph.data` (what extraction
# and the cost models read) imports on machines without egglog, like the GPU machine.
_LAZY = {"Limits": "session", "SaturationReport": "session", "Session": "session", "StopReason": "session",
         "Ref": "terms", "Term": "terms"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"einsat.egraph.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'einsat.egraph' has no attribute {name!r}")

__all__ = ["ABSENT", "BackOff", "EClass", "EGraphData", "ENode", "Generator", "Limits", "Ref", "Rule",
           "Ruleset", "SaturationReport", "Schedule", "Session", "StopReason", "Term", "pat"]
