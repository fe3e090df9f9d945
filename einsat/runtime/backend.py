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
subclass's `run_node`.

Backends are found by name: `register_backend(name, factory)` makes `get_backend(name)` return
`factory()`. The runtime registers its own two (`numpy`, `onnxruntime`, in `interpreter`); a
backend kept outside this package registers itself from a module above it, so that the runtime
never imports it: `einsat.backends` (imported by `einsat/__init__.py`, hence before any of
einsat's modules runs) registers `cupy`, which loads `einsat.gpu` on first use.
"""

from __future__ import annotations

from collections.abc import Callable

from einsat.errors import EinsatError
from einsat.ir.ops.control import BodyOp

_FACTORIES: dict[str, Callable[[], object]] = {}


def register_backend(name: str, factory: Callable[[], object]) -> None:
    """Make `name` a backend of the interpreter loop: `get_backend(name)` returns `factory()`.
    The factory is called at each request, so it may import what the backend needs on first use
    (and return one backend object it keeps); registering a name again replaces its factory."""
    if not isinstance(name, str) or not name:
        raise EinsatError(f"a backend's name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise EinsatError(f"backend {name!r}: the factory must be callable, got {type(factory).__name__}")
    _FACTORIES[name] = factory


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in the order they were registered."""
    return tuple(_FACTORIES)


def get_backend(name: str):
    """The backend registered as `name` (see `register_backend`); an `EinsatError` naming the
    registered ones when there is none."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise EinsatError(f"unknown backend {name!r}; choose one of {list(_FACTORIES)}")
    return factory()


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

