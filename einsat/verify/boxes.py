"""Box propagation (PET §5.2, step 1): split points per dimension, from the inputs to the outputs.

A tensor's boxes are the cells of a grid given by interior split points per dimension. Inside
one box every element is the same polynomial up to a shift of positions: each position it reads
from an input moves affinely with the element's position and stays inside one box of that input
(or inside the padding), and every summation interval is the same. An op maps its inputs' splits
to its outputs' splits:

  - a position map along one axis (slice, pad, a conv or pool tap) splits the output where the
    position it reads crosses an input split or the input's edge, or stops moving affinely
    (`axis_splits`); a conv with a 3×3 kernel and padding 1 thus has the nine boxes of Figure 4;
  - reshapes merge and split dimensions (`reshape_splits`): a merged dimension is split at every
    block of its innermost input dimension, a split dimension at the digits of each split point;
  - transpose permutes, broadcasting and element-wise ops take the union, concat and correct add
    their seams, a grouped conv splits its channels at group boundaries;
  - a constant tensor is split wherever consecutive slices differ (`uniform_splits`); random
    inputs are one box each.
Ops without a rule here are split at every position (sound, only slower).

`propagate_grids` carries digit views through reshapes and transposes (`boxviews.py`), so that
strided boxes, such as the even rows of a parity reordering, stay one box each; the rules above
see the views merged back into split points (`Grid.plain`), and `propagate` returns those.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.registry import Op
from einsat.verify.boxrules import SPLIT_RULES, RuleContext
from einsat.verify.boxviews import Grid, permute, regroup
from einsat.verify.splits import Splits, every, none, norm, uniform_splits


def propagate_grids(graph, sources: dict[str, Splits], env=None) -> dict:
    """`boxviews.Grid` of every value of `graph`, from the splits of its inputs and weights
    (`sources`; a weight missing there is a constant, split by its values). Reshapes and
    transposes keep digit views; every other op's rule sees plain split points. `env` is the
    `FieldEnv` the graph will be evaluated in (it decides how batchnorm coefficients vary)."""
    ctx = RuleContext(graph, env)
    grids: dict[str, Grid] = {}
    for name in graph.inputs:
        grids[name] = Grid.of(graph.types[name].shape, sources.get(name, none(graph.types[name].shape)))
    for name, value in graph.weights.items():
        grids[name] = Grid.of(np.shape(value), sources[name] if name in sources else uniform_splits(value))
    for node in graph.nodes:
        ys = [graph.types[o].shape for o in node.outputs]
        if node.definition.permutes:  # a reshape or a transpose: its grid is a view of its input's
            g = grids[node.inputs[0]]
            view = permute(g, node.attrs["perm"]) if node.op is Op.TRANSPOSE else regroup(g, ys[0])
            if view is not None:
                grids[node.outputs[0]] = view
                continue
        ins = [grids[i].plain() if i else None for i in node.inputs]
        xs = [graph.types[i].shape if i else None for i in node.inputs]
        rule = SPLIT_RULES.get(node.op)
        outs = [every(y) for y in ys] if rule is None else rule(node, ins, xs, ys, ctx)
        for o, s, y in zip(node.outputs, outs, ys):
            grids[o] = Grid.of(y, norm(s, y))
    return grids


def propagate(graph, sources: dict[str, Splits], env=None) -> dict[str, Splits]:
    """Split points of every value of `graph` (`propagate_grids`, views merged: `Grid.plain`)."""
    return {name: g.plain() for name, g in propagate_grids(graph, sources, env).items()}
