"""The onnxruntime backend: a whole graph as one onnxruntime CPU session.

`einsat.run(graph, inputs, backend="onnxruntime")` exports the graph (`ir.onnx.export.to_onnx`,
with the values named in `keep` as extra outputs) and runs it in an `InferenceSession` on the CPU
execution provider: the interpreter loop sees one step, the whole graph. Sessions are cached
twice: per graph object (and outputs), so running a graph again costs one `session.run`, and per
exported model (a SHA-256 of its bytes, the last `MAX_SESSIONS`), so an equal graph built again
reuses the session without onnxruntime optimizing it again. A graph onnxruntime cannot load or
run fails as an `ExecutionError` naming the graph and carrying onnxruntime's message (which
names the ONNX node: einsat's node name, see the export).
"""

from __future__ import annotations

import hashlib
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from einsat.errors import ExecutionError
from einsat.ir.graph import Graph
from einsat.ir.registry import Op

MAX_SESSIONS = 8  # sessions kept by model digest (each holds its model's weights)


SILENT = 4  # onnxruntime's log severity "fatal": nothing below goes to stderr
_quieted = False


def quiet_onnxruntime(ort=None) -> None:
    """Keep onnxruntime's own log off stderr: its default logger (messages of no session) at
    `SILENT`, set once per process, when einsat first makes a session. Every session einsat
    makes (`new_session`) logs at `SILENT` too. An error onnxruntime logs is the message of the
    exception its call raises: einsat reports it in its own words (a failed timing: op, shapes
    and the error's first line, `pipeline.measure.profile`), once, on its logger; logged by
    onnxruntime as well, the profiler's one-node session of an out-of-range GatherND printed
    "[E:onnxruntime:, sequential_executor.cc:677 ExecuteKernel] Non-zero status code ..." past `-q`."""
    global _quieted
    if _quieted:
        return
    if ort is None:
        import onnxruntime as ort
    ort.set_default_logger_severity(SILENT)
    _quieted = True


def new_session(model: bytes, threads: int = 0, disabled_optimizers: tuple[str, ...] = (),
                profile_prefix: str | None = None, spinning: bool = True):
    """An onnxruntime CPU session for a serialized model (`threads` 0: onnxruntime's default;
    `profile_prefix`: onnxruntime's own profiler on, its JSON file named from that prefix;
    `spinning` False: its intra-op threads block between kernels instead of spin-waiting,
    `session.intra_op.allow_spinning=0`, as the sessions einsat times are made: see
    `runtime.profiler.ort_session`)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ExecutionError("running ONNX in onnxruntime needs it installed (pip install onnxruntime)") from e
    quiet_onnxruntime(ort)
    options = ort.SessionOptions()
    options.log_severity_level = SILENT  # a failure reaches einsat as an exception, which says it once
    options.intra_op_num_threads = threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(disabled_optimizers))


def unsafe_optimizers(graph) -> tuple[str, ...]:
    """The onnxruntime graph optimizers that would compute `graph` wrongly. MatmulTransposeFusion
    (onnxruntime 1.31) folds a transpose into a MatMul whose other operand is a vector and gets
    the product wrong (transpose([9, 4]) @ [9]): off for any graph with a vector matmul."""
    def vector_matmul(g) -> bool:
        return any((n.op in (Op.MATMUL, Op.FUSED_MATMUL) and any(g.types[i].rank == 1 for i in n.inputs[:2]))
                   or any(vector_matmul(v) for v in n.attrs.values() if isinstance(v, Graph)) for n in g.nodes)
    return ("MatmulTransposeFusion",) if vector_matmul(graph) else ()


@dataclass(frozen=True)
class GraphStep:
    """The one step of a graph on this backend: the whole graph, producing `outputs`."""

    graph: object
    outputs: tuple[str, ...]
    op_name: str = "whole graph in onnxruntime"

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.graph.inputs


class OnnxruntimeBackend:
    name = "onnxruntime"

    def __init__(self):
        self._by_graph: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._by_model: OrderedDict[bytes, object] = OrderedDict()

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array, order="C")  # ascontiguousarray would make a 0-d array 1-d

    def to_numpy(self, value) -> np.ndarray:
        return np.asarray(value)

    def constant(self, array):
        return array  # weights are initializers of the exported model: never fed

    def steps(self, graph, outputs):
        return [GraphStep(graph, tuple(outputs))]

    def execute(self, step: GraphStep, args, graph, bodies) -> list:
        feeds = {n: a for n, a in zip(step.inputs, args)}
        return self.session(step.graph, step.outputs).run(list(step.outputs), feeds)

    def session(self, graph, outputs: tuple[str, ...]):
        """The session running `graph` to `outputs` (built on first use, then cached)."""
        from einsat.ir.onnx.export import to_onnx  # here, not at import: `import einsat` does not load onnx

        per_graph = self._by_graph.setdefault(graph, {})
        if outputs not in per_graph:
            exported = graph if outputs == graph.outputs else graph.replace(outputs=outputs)
            model = to_onnx(exported, contrib=True).SerializeToString()  # onnxruntime runs its contrib ops
            digest = hashlib.sha256(model).digest()
            if digest not in self._by_model:
                self._by_model[digest] = new_session(model, disabled_optimizers=unsafe_optimizers(graph))
                while len(self._by_model) > MAX_SESSIONS:
                    self._by_model.popitem(last=False)
            self._by_model.move_to_end(digest)
            per_graph[outputs] = self._by_model[digest]
        return per_graph[outputs]


BACKEND = OnnxruntimeBackend()
