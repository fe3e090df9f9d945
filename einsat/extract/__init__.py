"""Extraction: extractors, and the rebuild of the chosen e-nodes as an `ir.Graph`.

    from einsat.extract import extract
    result = extract(session.export(), cost="h100", method="ilp", time_limit=10)
    result.graph, result.cost, result.gap

The cost models live in `einsat.cost`; the names users reach through `einsat.extract`
(`cost_model`, `CostModel`, `MeasuredCost`, ...) are re-exported here as they always were.
"""

from einsat.cost.devices import DEVICES, H100, H200, Device
from einsat.cost.model import CostModel, RooflineCost
from einsat.cost.models import COST_MODELS, DEFAULT_COST, cost_model, register_cost_model
from einsat.cost.profiled import MeasuredCost
from einsat.cost.target import TargetCost, cpu_model
from einsat.extract.extraction import METHODS, Extraction, extract
from einsat.extract.from_graph import egraph_data_from_graph, selection_of_graph
from einsat.extract.greedy import greedy_dag, greedy_tree
from einsat.extract.ilp import solve_ilp
from einsat.extract.local import improve
from einsat.extract.problem import Candidate, Problem, Selection
from einsat.extract.rebuild import rebuild

__all__ = ["COST_MODELS", "DEFAULT_COST", "DEVICES", "H100", "H200", "METHODS", "Candidate", "CostModel", "Device",
           "Extraction", "MeasuredCost", "Problem", "RooflineCost", "Selection", "cost_model", "egraph_data_from_graph",
           "extract", "greedy_dag", "greedy_tree", "improve", "rebuild", "register_cost_model",
           "selection_of_graph", "solve_ilp", "TargetCost", "cpu_model"]
