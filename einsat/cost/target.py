"""`TargetCost`: a measured cost model that fills its own profile on the target it models.

    model = cost_model("cpu")            # onnxruntime on this machine's CPU
    model.missing(signatures)            # what the cached profile lacks
    model.add(entries, method)           # measurements taken by a profiler (the pipeline: einsat.pipeline.measure)
    model.save()                         # the cache file, atomically

The profile lives in the user's cache (`profile_db.cache_path(machine)`: XDG_CACHE_HOME, keyed
by processor, backend and library versions), so a second run on the same machine reuses every
timing. Signatures the profile lacks (outside the profiling budget) are costed by the roofline
calibrated on the measured ones (`CalibratedRoofline`), or the target's rough prior
(`devices.CPU`) while fewer than three are measured.

Node costs keep the `CostModel` contract (extraction sums them). `graph_cost` is a prediction of
the whole program as the target runs it: onnxruntime's fusion groups costed as units
(`extract.fusion.ort_units`), less the layout reorders a one-node session runs and the program
does not (`layout_savings_us`), plus the fixed cost of one run call.
extract cannot run programs: the profiler is `einsat.runtime.profiler`, called from the top
level (`einsat.pipeline.measure`), which hands the entries over.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from einsat.cost.model import CostModel
from einsat.cost.ort_fusion import (
    EPILOGUE_KERNELS,
    LAYOUT_OPS,
    REORDER_IN,
    REORDER_OUT,
    Unit,
    blocked_layout,
    ort_units,
    unit_inputs,
    unit_outputs,
    unit_residuals,
)
from einsat.cost.profile_db import INPUTS_REVISION, ProfileDB, cache_path, cpu_machine
from einsat.cost.profiled import MeasuredCost, OptimisticBound, calibrated_fallback
from einsat.errors import EinsatError
from einsat.ir.registry import opdef
from einsat.ir.signature import Signature, signature_of

# the machine's figures each profiling run measures again (`runtime.profiler.profile_signatures`):
# the model keeps the median of the last HISTORY runs', so that one run under a passing load (the
# memory's bandwidth halved by another process) does not move every later prediction
SETTLED = frozenset({"call_overhead_us", "node_overhead_us", "stream_bytes_per_us"})
HISTORY = 5
# An entry timed under load, told by its batch's reference program (`ref_us`, timed in the same
# rounds): one whose reference ran more than LOADED_REF times the profile's quiet reference (the
# 10th percentile of its entries' `ref_us`, once QUIET_REFS entries have one) is timed again by
# the next profiling that asks for it, at most RETIMES times; of two timings the one whose
# reference ran faster is kept. Measured on the shared 2-core machine: a third of the 2-thread
# cache's entries had been timed with the reference 1.5x slower or more, its large GEMMs 10-30x.
LOADED_REF = 1.5
QUIET_REFS = 8
RETIMES = 2


class TargetCost(MeasuredCost):
    """Measured times of the machine at hand, profiled on demand and cached (module docstring).

    `target`: the backend that runs the programs ("onnxruntime" on a CPU, "cupy" on a GPU);
    `machine`: what the profile is valid for (its hash names the cache file); `path`: the
    cache file (default: `cache_path(machine)`)."""

    def __init__(self, target: str, machine: Mapping[str, Any], path: str | os.PathLike | None = None,
                 name: str | None = None):
        self.target = target
        self.folds_weights_at_load = target == "onnxruntime"  # the CuPy runtime runs every node
        self.views_run = target == "onnxruntime"  # its profile times each reshape, transpose, pad as a kernel
        self.contrib_ops = target == "onnxruntime"  # onnxruntime's com.microsoft ops (SkipLayerNormalization, ...)
        self.machine = dict(machine)
        self.kind = str(self.machine.get("kind", "cpu"))
        self.path = os.fspath(path) if path is not None else cache_path(self.machine)
        self.loaded = 0
        db = ProfileDB(device=dict(self.machine))
        self.problem = None  # why a cache file could not be used, if one could not
        if os.path.exists(self.path):
            try:
                db = ProfileDB.load(self.path)
            except EinsatError as e:  # a damaged cache is measured again, and then rewritten
                self.problem = str(e)
                db = ProfileDB(device=dict(self.machine))
            if db.device != self.machine:  # the key is a digest of the machine: this is a stale file
                db = ProfileDB(device=dict(self.machine))
            self.loaded = len(db)
        self._forget_stale_failures(db)
        db.mode = "us"
        super().__init__(db, fallback=calibrated_fallback(db, self.kind), mode="us",
                         name=name or f"measured-{self.kind}")
        self._optimistic = False
        self._bound: CostModel | None = None  # the optimistic bound, fitted when first asked
        self._quiet: tuple[float | None] | None = None  # `quiet_ref_us`, found when first asked

    @property
    def label(self) -> str:
        return f"{self.name}: timed on this machine's {self.target}"

    # -- node costs -----------------------------------------------------------------------------
    def node_cost(self, op, attrs, ins, outs) -> float:
        """The measured time of the op's signature (the calibrated fallback's for a signature the
        profile lacks), plus a node's dispatch inside a program (`node_overhead_us`).

        Entries also keep `ref_us`, the time of the profiler's reference program in their batch
        (`runtime.profiler.reference_graph`); they are not scaled by it: scaled to one load, the
        committed benchmark's predictions within 15% fell from 16 to 9 of 32 (the reference, a
        small MatMul hot in cache, does not slow down with what slows the convolutions down)."""
        if opdef(op).source:
            return 0.0
        try:
            sig = signature_of(op, attrs, ins)
        except EinsatError:
            sig = None
        entry = self.db.entries.get(sig.key) if sig is not None else None
        if entry is None:
            return self._guess().node_cost(op, attrs, ins, outs) + self.node_overhead_us
        return self._entry_us(entry) + self.node_overhead_us

    def _guess(self) -> CostModel:
        if not self._optimistic:
            return self.fallback
        if self._bound is None:
            self._bound = OptimisticBound.fit(self.db, self.fallback)
        return self._bound

    @contextlib.contextmanager
    def optimistic(self):
        """Within the block an op the profile lacks costs what it might at best
        (`OptimisticBound`: its family's fastest rates, at most the calibrated guess): an
        extraction then chooses the unmeasured ops that could pay, for `measure.choose` to time."""
        self._optimistic = True
        try:
            yield self
        finally:
            self._optimistic = False

    def _entry_us(self, entry: Mapping) -> float:
        """A measured entry's kernel time (µs), floored at the fallback's cost of a view."""
        us = float(entry.get(self.db.mode, entry["us"]))
        floor = getattr(getattr(self.fallback, "device", None), "view_us", 1e-3)
        return max(us, floor)

    def _unit_entry(self, unit) -> Mapping | None:
        if opdef(unit.op).source or unit.constant:
            return None
        try:
            sig = signature_of(unit.op, unit.attrs, list(unit.ins))
        except EinsatError:
            return None
        return self.db.entries.get(sig.key) if sig is not None else None

    # -- the profile ---------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        """The intra-op threads the target runs with (a CPU profile is keyed by them)."""
        return int(self.machine.get("threads", 1))

    @property
    def call_overhead_us(self) -> float:
        """The fixed cost of one run call on the target (a session's `run`), measured with the profile."""
        return float(self.db.method.get("call_overhead_us", 0.0))

    @property
    def node_overhead_us(self) -> float:
        """What one more node costs inside a program besides its kernel (the executor's
        dispatch: `runtime.profiler.chain_graph`), measured with the profile; part of every
        node's cost, so that extraction sees that fewer nodes cost less. A one-node session's
        call overhead holds one node's dispatch already: `graph_cost` takes one off."""
        return float(self.db.method.get("node_overhead_us", 0.0))

    @property
    def layout_ops(self) -> frozenset:
        """The ops whose entries keep their kernels' shares (`runtime.profiler.profile_signatures`)."""
        return LAYOUT_OPS if self.target == "onnxruntime" else frozenset()

    def missing(self, sigs: Iterable[Signature]) -> list[Signature]:
        """The distinct signatures of `sigs` that the profile neither holds nor failed to measure
        (an entry of a layout op taken before entries kept their kernels' shares counts as missing,
        and so does one timed under load, `timed_under_load`)."""
        out: dict[str, Signature] = {}
        for s in sigs:
            entry = self.db.entries.get(s.key)
            stale = entry is not None and (s.op in self.layout_ops and "kernel_share" not in entry
                                           or self.timed_under_load(entry))
            if (entry is None or stale) and s.key not in self.db.failures:
                out.setdefault(s.key, s)
        return list(out.values())

    def quiet_ref_us(self) -> float | None:
        """The profile's quiet reference time (µs): the 10th percentile of its entries' `ref_us`
        (None with fewer than `QUIET_REFS` such entries)."""
        if self._quiet is None:
            refs = sorted(float(e["ref_us"]) for e in self.db.entries.values() if "ref_us" in e)
            self._quiet = (refs[len(refs) // 10],) if len(refs) >= QUIET_REFS else (None,)
        return self._quiet[0]

    def timed_under_load(self, entry: Mapping) -> bool:
        """Whether `entry` was timed under load and may be timed again (see `LOADED_REF`)."""
        quiet = self.quiet_ref_us()
        return (quiet is not None and "ref_us" in entry and float(entry["ref_us"]) > LOADED_REF * quiet
                and int(entry.get("retimed", 0)) < RETIMES)

    def add(self, entries: Mapping[str, Mapping], method: Mapping | None = None,
            failures: Mapping[str, str] | None = None, sigs: Iterable[Signature] = ()) -> None:
        """Take measured entries (signature key -> entry with "us"), then refit the fallback."""
        by_key = {s.key: s for s in sigs}
        for key, entry in entries.items():
            if key not in by_key:
                raise EinsatError(f"measured entry {key!r} comes without its signature")
            old = self.db.entries.get(key)
            if old is not None and "ref_us" in old and "ref_us" in entry:  # timed again (`timed_under_load`)
                # the earlier timing stands where it was quieter and holds all the new one does (an
                # entry timed again for the kernel shares it lacked takes the new one)
                kept = float(old["ref_us"]) <= float(entry["ref_us"]) and entry.keys() <= old.keys()
                quieter = old if kept else entry
                entry = {**{k: v for k, v in quieter.items() if k != "signature"},
                         "retimed": int(old.get("retimed", 0)) + 1}
            self.db.add(by_key[key], **entry)
        self._quiet = None
        self.db.failures.update(failures or {})
        if method:
            merged = {**self.db.method, **method}
            for key in SETTLED & method.keys():  # the median of the last few profiling runs' figures
                history = [*self.db.method.get(f"{key}_history", []), float(method[key])][-HISTORY:]
                merged[f"{key}_history"] = history
                merged[key] = statistics.median(history)
            self.db.method = merged
        if self.target == "onnxruntime":  # its failures, all recorded with the inputs fed now
            self.db.method["inputs_revision"] = INPUTS_REVISION
        self.fallback = calibrated_fallback(self.db, self.kind)
        self._bound = None

    def _forget_stale_failures(self, db: ProfileDB) -> None:
        """Drop `db`'s failures recorded with other inputs than the profiler feeds now (an
        onnxruntime profile's `inputs_revision`): those signatures are timed again."""
        if self.target == "onnxruntime" and db.method.get("inputs_revision") != INPUTS_REVISION:
            db.failures.clear()

    def refresh(self) -> int:
        """Take what other processes saved to the cache file that this model lacks (a partitioned
        run's worker processes profile their pieces on copies of the model): their entries, their
        failures and, where this model has measured none, the fixed figures (`method`); the
        fallback is refitted. Returns the entries taken."""
        if not os.path.exists(self.path):
            return 0
        try:
            disk = ProfileDB.load(self.path)
        except EinsatError:
            return 0
        if disk.device != self.machine:
            return 0
        self._forget_stale_failures(disk)
        new = {k: e for k, e in disk.entries.items() if k not in self.db.entries}
        self.db.entries.update(new)
        for key, why in disk.failures.items():
            if key not in self.db.entries:
                self.db.failures.setdefault(key, why)
        self.db.method = {**disk.method, **self.db.method}
        if new:
            self.fallback = calibrated_fallback(self.db, self.kind)
            self._bound = None
            self._quiet = None
        return len(new)

    def save(self) -> None:
        """Write the profile to its cache file (atomically; the folder is created), merged with the
        entries another run saved there meanwhile (this model's win where both measured a
        signature): two runs profiling on one machine keep each other's entries. A lock file
        beside it keeps the read-merge-write of two runs apart (where `fcntl` exists)."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with _locked(self.path + ".lock"):
            if os.path.exists(self.path):
                try:
                    disk = ProfileDB.load(self.path)
                except EinsatError:
                    disk = None  # a damaged file is replaced
                if disk is not None and disk.device == self.db.device:
                    self._forget_stale_failures(disk)
                    disk.merge(self.db)  # this model's entries win
                    self.db.entries, self.db.failures = disk.entries, disk.failures
            self.db.save(self.path)

    # -- whole programs --------------------------------------------------------------------------
    def units(self, graph) -> list:
        """What the target runs as one kernel: onnxruntime's fusion groups; on another target
        (CuPy) every node, as einsat's own fused ops already are the fusions it runs."""
        if self.target == "onnxruntime":
            return ort_units(graph)
        return [Unit((n,), n.op, dict(n.attrs), *map(tuple, graph.node_types(n))) for n in graph.nodes]

    def unit_cost(self, unit) -> float:
        """A unit's time: its op's, or 0 for a constant one (folded when the model loads)."""
        if unit.constant:
            return 0.0
        return self.node_cost(unit.op, unit.attrs, list(unit.ins), list(unit.outs))

    def graph_cost(self, graph) -> float:
        """The predicted time of `graph` on the target (µs): its fusion groups as units, plus the
        fixed cost of one run call. When the program's weights exceed the last-level cache
        (`method["cache_bytes"]`), a unit costs at least the time its weights take to stream
        from memory (`method["stream_bytes_per_us"]`, `runtime.profiler.stream_graph`): its
        one-node time was taken with them hot in cache."""
        every = self.units(graph)
        kept = [(u, saved) for u, saved in zip(every, self.layout_savings_us(graph, every))
                if not u.constant and not opdef(u.op).source]
        units = [u for u, _ in kept]
        total = self.call_overhead_us - self.node_overhead_us * min(len(units), 1)
        costs = [self.unit_cost(u) - saved for u, saved in kept]
        bandwidth = float(self.db.method.get("stream_bytes_per_us", 0.0))
        cache = float(self.db.method.get("cache_bytes", 0.0))
        if bandwidth <= 0 or sum(a.nbytes for a in graph.weights.values()) <= cache:
            return total + sum(costs)
        for u, cost in zip(units, costs):
            weights = {i for n in u.nodes for i in n.inputs if i in graph.weights}
            streamed = sum(graph.weights[w].nbytes for w in weights) / bandwidth
            total += max(cost, streamed + self.node_overhead_us)
        return total

    def layout_savings_us(self, graph, units: list | None = None) -> list[float]:
        """Per unit of `units` (default: the program's `units(graph)`; pass them all, constant
        ones included, in order), the µs of its one-node time that the program does not run:
        onnxruntime keeps its blocked layout between the units that run in it
        (`extract.fusion.blocked_layout`), so a unit whose data input arrives blocked does not
        reorder it (its entry's `ReorderInput` share), one whose output stays blocked does not
        reorder that (`ReorderOutput`), and a fused convolution whose residual arrives blocked
        adds it and activates in its own kernel, where its one-node session ran the Add and the
        activation as kernels of their own. Entries without kernel shares (another target, or
        no layout change) save nothing. `node_cost` (what extraction sums) and `cost_by_op`
        charge the one-node times in full: the savings are the whole program's."""
        if units is None:
            units = self.units(graph)
        entries = [self._unit_entry(u) for u in units]
        shares = [dict(e.get("kernel_share") or {}) if e is not None else {} for e in entries]
        reordered = [bool(sh.get(REORDER_IN) or sh.get(REORDER_OUT)) for sh in shares]
        if not any(reordered):
            return [0.0] * len(units)
        folded = {o for u in units if u.constant for o in unit_outputs(u)}  # weights' layouts, folded at load
        blocked, staying = blocked_layout(graph, units, reordered, folded, self.nchwc_block)
        saved = []
        for k, (u, entry, sh) in enumerate(zip(units, entries, shares)):
            if not reordered[k] or u.constant:
                saved.append(0.0)
                continue
            ins = unit_inputs(u, graph, folded)
            share = 0.0
            if ins and ins[0] in blocked:
                share += sh.get(REORDER_IN, 0.0)
            if all(o in staying for o in unit_outputs(u)):
                share += sh.get(REORDER_OUT, 0.0)
            residual = unit_residuals(u, graph, folded)
            if residual and all(i in blocked for i in residual):
                share += sum(v for op, v in sh.items() if op in EPILOGUE_KERNELS)
            saved.append(self._entry_us(entry) * min(share, 1.0))
        return saved

    @property
    def nchwc_block(self) -> int:
        """The channels of a block of onnxruntime's NCHWc layout on this machine (recorded by the
        profiler: `runtime.profiler.nchwc_block`)."""
        return int(self.db.method.get("nchwc_block", 8))

    def cost_by_op(self, graph) -> dict[str, float]:
        """The predicted time by op name, a fusion group charged to its first op."""
        out: dict[str, float] = {}
        for u in self.units(graph):
            name = u.nodes[0].op_name
            out[name] = out.get(name, 0.0) + self.unit_cost(u)
        return out

    def unit_signatures(self, graph) -> list[Signature]:
        """The signatures `graph_cost` looks up: every unit's, fused groups included."""
        out: dict[str, Signature] = {}
        for u in self.units(graph):
            if opdef(u.op).source or u.constant:
                continue
            try:
                sig = signature_of(u.op, u.attrs, list(u.ins))
            except EinsatError:
                continue
            if sig is not None:
                out.setdefault(sig.key, sig)
        return list(out.values())


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive lock on `path` (created) for the block; no lock where `fcntl` is missing."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic write alone
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cpu_model(path: str | os.PathLike | None = None, threads: int = 1) -> TargetCost:
    """`cost="cpu"`: onnxruntime on this machine's CPU with `threads` intra-op threads (one by
    default, as `runtime.profiler.THREADS` says why), profiled on demand into the user's cache."""
    return TargetCost("onnxruntime", cpu_machine(threads), path, name="measured-cpu")
