"""The e-graph: egglog encoding of programs, shape analysis, bounded saturation, export.

`Session` is the entry point (see `einsat.egraph.session`); `EGraphData` is what it exports.
"""

from einsat.egraph.data import ABSENT, EClass, EGraphData, ENode
from einsat.egraph.rules import BackOff, Generator, Rule, Ruleset, Schedule
from einsat.egraph.session import Limits, SaturationReport, Session, StopReason
from einsat.egraph.terms import Ref, Term

__all__ = ["ABSENT", "BackOff", "EClass", "EGraphData", "ENode", "Generator", "Limits", "Ref", "Rule",
           "Ruleset", "SaturationReport", "Schedule", "Session", "StopReason", "Term"]
