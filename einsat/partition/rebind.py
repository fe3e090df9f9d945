"""One piece's optimized program applied to another piece with the same fingerprint.

The template piece was optimized with `Options(recipe=True)`: its optimized program reads the
template's inputs and weights and may hold new weights the optimizer folded from them (merged
Q/K/V matrices, a scale multiplied into a matrix, ...); the recipe recomputes those from the
template's weights. For a copy, every interface name is replaced by the copy's (inputs, outputs,
parameters and constants correspond by canonical position, `partition.fingerprint`), and the
new weights are the recipe run (NumPy) on the copy's own parameters. Internal value names are
the template's; `stitch` renames those that clash.
"""

from __future__ import annotations

import numpy as np

from einsat.errors import EinsatError
from einsat.ir.graph import Graph, Node
from einsat.partition.fingerprint import Canonical
from einsat.runtime import run


def rebind(optimized: Graph, recipe: Graph | None, template: Canonical, copy: Canonical, copy_graph: Graph,
           tag: str, names: dict[str, str] | None = None) -> Graph:
    """`optimized` (the template's program) reading `copy_graph`'s inputs, weights and output names.
    New weights are named `<tag>.<template name>`. `names`, if given, is filled with the template's
    names of interface values and weights and the copy's names for them."""
    if template.key != copy.key:
        raise EinsatError("rebind: the pieces have different fingerprints")
    names = {} if names is None else names
    for a, b in zip(template.inputs + template.outputs + template.params + template.constants,
                    copy.inputs + copy.outputs + copy.params + copy.constants):
        names[a] = b
    weights: dict[str, np.ndarray] = {}
    made: dict[str, np.ndarray] = {}
    if recipe is not None and recipe.outputs:
        feeds = {i: copy_graph.weights[names[i]] for i in recipe.inputs}
        made = dict(zip(recipe.outputs, (run(recipe, feeds)[o] for o in recipe.outputs)))
    for w, array in optimized.weights.items():
        if w in names:
            weights[names[w]] = copy_graph.weights[names[w]]
        elif w in made:
            names[w] = f"{tag}.{w}"
            weights[names[w]] = np.asarray(made[w], dtype=array.dtype)
        else:
            raise EinsatError(f"rebind: weight {w!r} of the optimized template is neither the template's "
                              "nor made by its recipe")
    nodes = [Node(n.op, [names.get(i, i) for i in n.inputs], [names.get(o, o) for o in n.outputs], dict(n.attrs))
             for n in optimized.nodes]
    return Graph(nodes, {names[i]: t for i, t in optimized.input_types().items()},
                 [names[o] for o in optimized.outputs], weights, copy_graph.name)
