"""Backends: what the interpreter loop runs a graph on.

A backend has a `name` and

    from_numpy(array) -> value          a NumPy array as one of its values (an input)
    to_numpy(value) -> np.ndarray       and back (an output)
    constant(array) -> value            a weight (a backend may cache it by array)
    steps(graph, outputs) -> [step]     what the loop runs, in order: the nodes, or one step
                                        standing for several; a step has `name`, `op_name`,
                                        `inputs` and `outputs` like a `Node`
    execute(step, args, graph, bodies) -> [value]   run one step on its argument values

`NodeBackend` is the base of the backends that run node by node: a loop or if node runs its
bodies through the loop (`bodies`, see `einsat.ir.ops.control`), every other node through the
subclass's `run_node`. `interpreter.get_backend` names the backends.
"""

from __future__ import annotations

from einsat.ir.ops.control import BodyOp


class NodeBackend:
    """A backend that runs a graph node by node."""

    name = "node"

    def from_numpy(self, array):
        raise NotImplementedError

    def to_numpy(self, value):
        raise NotImplementedError

    def constant(self, array):
        return self.from_numpy(array)

    def steps(self, graph, outputs):
        return graph.nodes

    def execute(self, node, args, graph, bodies) -> list:
        if isinstance(node.definition, BodyOp):
            return node.definition.run(args, node.attrs, bodies)
        return self.run_node(node, args, graph)

    def run_node(self, node, args, graph) -> list:
        """The outputs of one node (not a loop or if) on its argument values."""
        raise NotImplementedError

