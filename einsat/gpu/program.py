"""Whole programs on the GPU: a static memory plan and a CUDA graph replay.

`CompiledProgram(graph)` lowers the program once and then replays it:

1. trace: run every node once with a recording allocator, noting each allocation's size, the
   node that makes it and the values that end up living in it (an op may return a view of an
   input or of a fresh buffer);
2. plan: give each allocation an offset in one arena so that two allocations share memory only
   when their lifetimes (first node to last reader) are disjoint — greedy by size, largest
   first, each at the lowest offset that fits (`plan_offsets`);
3. capture: run the nodes again with the allocator replaying the plan, inside CUDA stream
   capture, and keep the graph. `run` copies the inputs into their static buffers and launches
   the graph: one launch for the whole program.

A program whose nodes read values back to the host (loops, ifs, host fallbacks) can take a
different path on other data, so it gets neither a graph nor a static plan: it is run node by
node each time (`mode` says which: "graph", "planned" (no CUDA streams, or a capture that
failed: `graph_fallback` says why) or "eager"). Inputs and weights are put on the device on the
program's own stream, which never waits for the legacy one. The planning functions are pure and
run without a GPU.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.backend_cupy import GpuBackend
from einsat.ir.graph import Graph
from einsat.ir.ops.control import BodyOp
from einsat.runtime import Hooks, check_inputs, evaluate

ALIGN = 256


@dataclass
class Allocation:
    """One buffer the program needs: its bytes and the node steps it is live across."""

    nbytes: int
    first: int
    last: int
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    offset: int = -1


def plan_offsets(allocs: list[Allocation], align: int = ALIGN) -> int:
    """Assign `offset` to every allocation; return the arena size.

    Two allocations may overlap in memory only if their live ranges [first, last] are disjoint.
    Greedy by size: the largest first, each at the lowest aligned offset that clears every
    already placed allocation whose live range meets its own.
    """
    order = sorted(range(len(allocs)), key=lambda i: (-allocs[i].nbytes, allocs[i].first, i))
    placed: list[Allocation] = []
    total = 0
    for i in order:
        a = allocs[i]
        size = -(-max(a.nbytes, 1) // align) * align
        busy = sorted((p.offset, p.offset + -(-max(p.nbytes, 1) // align) * align) for p in placed
                      if not (p.last < a.first or a.last < p.first))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        a.offset = offset
        placed.append(a)
        total = max(total, offset + size)
    return total


class _Tracer:
    """The allocator of the trace run: fresh buffers, recorded in order."""

    def __init__(self, base):
        self.base = base
        self.allocs: list[Allocation] = []
        self.arrays: list = []
        self.step = 0

    def __call__(self, shape, dtype):
        arr = self.base(shape, dtype)
        self.allocs.append(Allocation(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,
                                      self.step, self.step, tuple(shape), np.dtype(dtype).name))
        self.arrays.append(arr)
        return arr


class _Replayer:
    """The allocator of the captured run: the k-th request gets the k-th planned buffer."""

    def __init__(self, arena, allocs: list[Allocation], xp):
        self.arena, self.allocs, self.xp = arena, allocs, xp
        self.k = 0

    def __call__(self, shape, dtype):
        if self.k >= len(self.allocs):
            raise ExecutionError("the program allocated more buffers than when it was traced")
        a = self.allocs[self.k]
        if tuple(shape) != a.shape or np.dtype(dtype).name != a.dtype:
            raise ExecutionError(f"allocation {self.k}: traced {a.shape} {a.dtype}, now {tuple(shape)} "
                                 f"{np.dtype(dtype).name}: the lowering is not deterministic")
        self.k += 1
        n = int(np.prod(shape, dtype=np.int64))
        flat = self.arena[a.offset:a.offset + a.nbytes].view(dtype)
        return flat[:n].reshape(shape)


def _owner(arr, candidates: list[tuple[int, int, int]]) -> int | None:
    """Which candidate buffer (start, end, id) holds `arr`'s first element (None: none)."""
    ptr = _ptr(arr)
    for start, end, ident in candidates:
        if start <= ptr < end or (start == ptr == end):
            return ident
    return None


def _ptr(arr) -> int:
    data = getattr(arr, "data", None)
    return int(data.ptr) if hasattr(data, "ptr") else int(arr.ctypes.data)


@dataclass
class Trace:
    """What the trace run learned: allocations, and which allocation each value lives in."""

    allocs: list[Allocation]
    value_owner: dict[str, int] = field(default_factory=dict)
    host_sync: bool = False


class _TraceHooks(Hooks):
    """Follows the trace run step by step: which allocation each value of the program lives in."""

    def __init__(self, graph: Graph, tracer: _Tracer, result: Trace):
        self.graph, self.tracer, self.result = graph, tracer, result
        self.start = 0

    def before(self, graph, k, node, args):
        if graph is not self.graph:  # a body's steps: allocated, and owned, at the loop's step
            return
        if isinstance(node.definition, BodyOp):  # the trip count or condition is read on the host
            self.result.host_sync = True
        self.tracer.step, self.start = k, len(self.tracer.allocs)

    def after(self, graph, k, node, args, outs):
        if graph is not self.graph:
            return
        tracer, owners = self.tracer, self.result.value_owner
        # the buffers made by this node, and those holding its inputs (all alive now)
        cands = [(_ptr(tracer.arrays[j]), _ptr(tracer.arrays[j]) + tracer.allocs[j].nbytes, j)
                 for j in range(self.start, len(tracer.allocs))]
        cands += [(_ptr(a), _ptr(a) + max(1, a.nbytes), owners[i])
                  for i, a in zip(node.inputs, args) if i and i in owners]
        for name, arr in zip(node.outputs, outs):
            owner = _owner(arr, cands)
            if owner is not None:
                owners[name] = owner
        # the loop frees what no later node reads: the trace peaks at the program's live memory,
        # not at the sum of its buffers
        for j in range(self.start, len(tracer.arrays)):
            tracer.arrays[j] = None


def trace(backend: GpuBackend, graph: Graph, inputs: dict) -> Trace:
    """Run `graph` once on the backend's device (`inputs`: device arrays), recording its memory."""
    dev = backend.device
    saved = dev.allocator
    tracer = _Tracer(saved)
    dev.allocator = tracer
    downloads_before = getattr(dev, "downloads", 0)
    result = Trace(tracer.allocs)
    try:
        evaluate(graph, inputs, backend, _TraceHooks(graph, tracer, result))
    finally:
        dev.allocator = saved
    result.host_sync |= bool(backend.host_fallbacks) or getattr(dev, "downloads", 0) != downloads_before
    return result


def lifetimes(graph: Graph, tr: Trace) -> None:
    """Extend each allocation's live range to the last node reading a value inside it; graph
    outputs live to the end."""
    end = len(graph.nodes)
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            if i in tr.value_owner:
                a = tr.allocs[tr.value_owner[i]]
                a.last = max(a.last, k)
    for o in graph.outputs:
        if o in tr.value_owner:
            tr.allocs[tr.value_owner[o]].last = end


def _end_capture(stream, failing: bool):
    """End stream capture. When the captured run itself failed, the capture is invalid and
    ending it raises too: that error is dropped, so the run's own error is the one reported."""
    try:
        return stream.end_capture()
    except Exception:
        if failing:
            return None
        raise


def _new_stream(device):
    """The program's own stream, or None on a device without streams (it runs "planned")."""
    make = getattr(device, "new_stream", None)
    return make() if make is not None else None


class CompiledProgram:
    """A graph lowered once, with a static memory plan, replayed as a CUDA graph.

    >>> prog = CompiledProgram(graph)          # traces, plans, captures
    >>> outs = prog.run({"x": x})              # NumPy in, NumPy out
    >>> prog.replay()                          # device only: inputs already in prog.inputs
    """

    def __init__(self, graph: Graph, device=None, use_graph: bool = True):
        if device is None:
            from einsat.gpu.device import CupyDevice
            device = CupyDevice()
        self.graph, self.dev = graph, device
        self.backend = GpuBackend(device)
        xp = device.xp
        self._stream = _new_stream(device)
        self.graph_fallback: str | None = None  # why capture failed, when it did
        with self._on_stream():
            # staged on the program's stream: a non-blocking stream does not wait for the legacy one
            self.inputs = {n: device.zeros(graph.types[n].shape, graph.types[n].dtype) for n in graph.inputs}
            for a in graph.weights.values():  # uploaded (and cached) before the trace and the capture
                device.constant(a)
            launches = getattr(device, "launches", None)
            self._trace = trace(self.backend, graph, self.inputs)
            empty = launches is not None and device.launches == launches  # views only: nothing to capture
            lifetimes(graph, self._trace)
            self.arena_bytes = plan_offsets(self._trace.allocs)
            self.arena = xp.empty(max(self.arena_bytes, 1), dtype=np.uint8)
            if self._trace.host_sync:
                self.mode = "eager"
            elif use_graph and self._stream is not None and not empty:
                self.mode = "graph"
            else:
                self.mode = "planned"
            self.outputs = {"graph": self._capture, "planned": self._run_planned}.get(self.mode, dict)()
            self._sync()

    def _capture(self) -> dict:
        """The first run, captured as a CUDA graph. Should capture fail (cuDNN's legacy API under
        capture is not documented to work), the program runs planned instead and
        `graph_fallback` says why; an error of the program itself shows again in that run."""
        try:
            outputs = self._run_planned(capture=True)
            # the graph points into the device's workspace: keep that buffer as long as the graph
            self._workspace = getattr(self.dev, "workspace_buffer", lambda: None)()
            return outputs
        except Exception as e:  # noqa: BLE001 - any capture failure: the planned run reports real errors
            self.mode, self._cuda_graph = "planned", None
            self.graph_fallback = f"{type(e).__name__}: {e}"
            return self._run_planned()

    def _on_stream(self):
        import contextlib
        return self._stream if self._stream is not None else contextlib.nullcontext()

    def _sync(self):
        if self._stream is not None:
            self._stream.synchronize()

    @property
    def graph_mode(self) -> bool:
        return self.mode == "graph"

    def _run_planned(self, capture: bool = False, planned: bool = True) -> dict:
        dev = self.dev
        saved = dev.allocator
        if planned:
            dev.allocator = _Replayer(self.arena, self._trace.allocs, dev.xp)
        try:
            if capture:
                self._stream.begin_capture()
            try:
                return evaluate(self.graph, self.inputs, self.backend)
            finally:
                if capture:
                    self._cuda_graph = _end_capture(self._stream, failing=sys.exc_info()[0] is not None)
        finally:
            dev.allocator = saved

    def replay(self) -> None:
        """Run the program on the data already in `self.inputs` (asynchronously)."""
        with self._on_stream():
            if self.mode == "graph":
                self._cuda_graph.launch(self._stream)
            else:
                self.outputs = self._run_planned(capture=False, planned=self.mode == "planned")

    def run(self, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Copy `inputs` in, replay, and return the outputs as NumPy arrays."""
        check_inputs(self.graph, inputs)
        with self._on_stream():
            for n, buf in self.inputs.items():
                self.dev.copy_in(buf, inputs[n])
        self.replay()
        self._sync()
        return {o: self.dev.download(v) for o, v in self.outputs.items()}
