"""Costs from measurements: `MeasuredCost(db)` and the roofline calibrated on the same device.

`MeasuredCost(db)` returns the measured time of every signature the profile holds and, for
the others, `CalibratedRoofline.fit(db)`: per op family (GEMMs, convolutions, other kernels)

    t = launch + max(flops / peak, bytes / bandwidth)

with launch, peak and bandwidth fitted to the measured ops by least squares on log time (so a
5 µs kernel counts as much as a 5 ms one). Views (ops that issue no kernel) cost the device's
view time. A convolution the profile lacks is costed from its nearest measured convolution
instead (`ConvNeighbours`): cuDNN's times follow its algorithms, not a roofline (on the H100
profile, for shapes it had not measured, the nearest neighbour came within 25% for 57% of the
convolutions, the conv roofline for 18%). `db` may be a `ProfileDB`, a path, or a device kind with a committed profile
("h100" -> einsat/gpu/profiles/h100.json).

`export_signatures` writes every e-node of an e-graph as a signature file: the CPU machine
runs it, the GPU machine (no egglog) profiles the file with `einsat profile`. The profile and
signature formats are defined beside the profiler (`einsat.cost.profile_db`,
`einsat.ir.signature`, pure Python).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from einsat.cost.devices import CPU, DEVICES, H100, Device
from einsat.cost.model import CostModel, RooflineCost, flops_and_bytes, separate_epilogue
from einsat.cost.profile_db import MODES, ProfileDB, committed_profile
from einsat.errors import EinsatError
from einsat.ir.groups import CONVOLUTIONS
from einsat.ir.registry import Op, opdef
from einsat.ir.signature import Signature, signature_of, write_signatures
from einsat.ir.types import TensorType

FAMILIES = ("gemm", "conv", "kernel")


def family(op: Op) -> str:
    """The roofline an op is fitted to: its tensor-core family ("gemm", "conv"), "view" for ops
    that issue no kernel, "kernel" for the others (the registry's `tensor_core` and `view`)."""
    d = opdef(op)
    if d.tensor_core is not None:
        return d.tensor_core
    return "view" if d.view else "kernel"


def datasheet(kind: str) -> Device:
    """The datasheet figures a calibration starts from: the device's own, or the H100's for a GPU
    einsat has none of, `CPU`'s rough figures for "cpu" (a weak prior only: the measurements move
    the fit away from it)."""
    return CPU if kind == "cpu" else DEVICES.get(kind, H100)


@dataclass(frozen=True)
class Roofline:
    """One family's fitted roofline: launch overhead (µs), peak (FLOP/µs), bandwidth (B/µs)."""

    launch_us: float
    flops_per_us: float
    bytes_per_us: float

    @staticmethod
    def of(device: Device) -> "Roofline":
        """A device's datasheet figures as a roofline (CUDA-core fp32 peak, HBM bandwidth)."""
        return Roofline(device.launch_us, device.fp32_flops / 1e6, device.hbm_bytes_per_s / 1e6)

    def time(self, flops, moved):
        return self.launch_us + np.maximum(np.asarray(flops) / self.flops_per_us,
                                           np.asarray(moved) / self.bytes_per_us)


PRIOR_WEIGHT = 1e-3


def fit_roofline(flops: Sequence[float], moved: Sequence[float], us: Sequence[float],
                 prior: Roofline | None = None) -> Roofline:
    """Least squares on log time of t = launch + max(flops/peak, bytes/bandwidth).

    Parameters are fitted in log space (so they stay positive) from several starting points;
    the best fit wins. A weak prior (weight 1e-3 per log unit, towards `prior`, by default
    `datasheet("gpu")`'s figures) settles what the timings cannot tell apart: the peak of a family
    whose kernels are all memory-bound, whose FLOPs grow in proportion to their bytes.
    Needs at least 3 timings.
    """
    from scipy.optimize import least_squares

    f, b, t = (np.asarray(v, dtype=np.float64) for v in (flops, moved, us))
    keep = t > 0
    f, b, t = f[keep], b[keep], t[keep]
    if len(t) < 3:
        raise EinsatError(f"a roofline fit needs at least 3 timed ops, got {len(t)}")
    logt = np.log(t)
    if prior is None:
        prior = Roofline.of(datasheet("gpu"))
    p_prior = np.log([prior.launch_us, prior.flops_per_us, prior.bytes_per_us])

    def residual(p):
        launch, peak, bw = np.exp(np.clip(p, -50, 50))
        data = np.log(launch + np.maximum(f / peak, b / bw)) - logt
        return np.concatenate([data, PRIOR_WEIGHT * (p - p_prior)])

    # starting points: launch from the fastest op, rates from the slowest ops' ratios, the prior
    slow = t >= np.percentile(t, 50)
    peak0 = max(np.max(f[slow] / t[slow]) if f[slow].any() else 1.0, 1.0)
    bw0 = max(np.max(b[slow] / t[slow]), 1.0)
    starts = [p_prior] + [np.log([max(t.min() * ls, 1e-3), peak0 * sc, bw0 * sc])
                          for sc in (0.25, 1.0, 4.0) for ls in (0.1, 0.5, 0.9)]
    best = min((least_squares(residual, p0, method="trf", x_scale="jac", max_nfev=2000) for p0 in starts),
               key=lambda r: r.cost)
    launch, peak, bw = np.exp(best.x)
    return Roofline(float(launch), float(peak), float(bw))


CONV_OPS = CONVOLUTIONS  # cuDNN's: the registry's tensor_core == "conv"
NEIGHBOUR_MIN = 20  # measured convolutions of a kind before their neighbours are trusted over the roofline
FLOP_SLOPE = 0.5    # how a neighbour's time scales with the FLOPs between it and the query (log-log)


def conv_features(op: Op, attrs: Mapping, x: Sequence[int], w: Sequence[int], flops: float, moved: float):
    """Where a convolution sits among others: log FLOPs, bytes, input channels, filters, output
    positions... (the input's spatial size), taps, groups; dilated, strided, fused."""
    groups = int(attrs.get("groups", 1))
    dilated = max(attrs.get("dilation", (1,)) or (1,)) > 1
    stride = max(attrs.get("stride", (1,)) or (1,))
    return np.array([np.log(flops + 1.0), np.log(moved + 1.0), np.log(x[1]), np.log(w[0]),
                     np.log(max(int(np.prod(x[2:])), 1)), np.log(max(int(np.prod(w[2:])), 1)), np.log(groups),
                     float(dilated), np.log(stride), float(op is Op.FUSED_CONV)])


class ConvNeighbours:
    """The time of an unmeasured convolution from its nearest measured one of the same kind
    (convolutions with their fused forms; transposed convolutions apart), in `conv_features`
    scaled by their spread: `log t = log t_nn + FLOP_SLOPE (log F - log F_nn)`."""

    def __init__(self, kinds: Mapping[str, tuple[np.ndarray, np.ndarray]]):
        self.kinds = {k: (f, t, f.std(axis=0) + 1e-9) for k, (f, t) in kinds.items()}

    @staticmethod
    def kind(op: Op) -> str:
        return "transpose" if op is Op.CONV_TRANSPOSE else "conv"

    @staticmethod
    def fit(db: ProfileDB) -> "ConvNeighbours":
        """The profile's measured convolutions of each kind, where it holds `NEIGHBOUR_MIN`."""
        points: dict[str, list] = {}
        for key, e in db.entries.items():
            op = entry_op(e)
            t = float(e.get(db.mode, e["us"]))
            if op not in CONV_OPS or t <= 0:
                continue
            sig = db.signature(key)
            x, w = sig.inputs[0].shape, sig.inputs[1].shape
            feats = conv_features(op, sig.attr_dict, x, w, float(e["flops"]), float(e["bytes"]))
            points.setdefault(ConvNeighbours.kind(op), []).append((feats, np.log(t)))
        return ConvNeighbours({k: (np.array([f for f, _ in ps]), np.array([t for _, t in ps]))
                               for k, ps in points.items() if len(ps) >= NEIGHBOUR_MIN})

    def estimate(self, op, attrs, ins, outs) -> float | None:
        """µs, or None for an op that is no convolution or of a kind with too few measured."""
        if op not in CONV_OPS or self.kind(op) not in self.kinds:
            return None
        feats_all, logt, spread = self.kinds[self.kind(op)]
        flops, moved = flops_and_bytes(op, attrs, ins, outs)
        q = conv_features(op, attrs, ins[0].shape, ins[1].shape, flops, moved)
        k = int(np.argmin((((feats_all - q) / spread) ** 2).sum(axis=1)))
        return float(np.exp(logt[k] + FLOP_SLOPE * (q[0] - feats_all[k, 0])))


def entry_op(entry) -> Op | None:
    """A profile entry's op; None for an op this einsat does not have (a profile file is shared by
    every einsat on the machine, and a newer one may have timed ops this one does not know)."""
    try:
        return Op(entry["signature"]["op"])
    except ValueError:
        return None


def timed_entries(db: ProfileDB):
    """(family, FLOPs, bytes, time in the profile's mode) of each entry of an op einsat knows;
    entries that issue no kernel count as "view"."""
    for e in db.entries.values():
        op = entry_op(e)
        if op is None:
            continue
        fam = "view" if e.get("kernels", 1) == 0 else family(op)
        yield fam, float(e.get("flops", 0)), float(e.get("bytes", 0)), float(e.get(db.mode, e["us"]))


class CalibratedRoofline(CostModel):
    """A roofline per op family, fitted to a profile of the same device (see `fit`)."""

    def __init__(self, families: Mapping[str, Roofline], view_us: float, kind: str = "gpu"):
        self.families = dict(families)
        self.view_us = view_us
        self.device = datasheet(kind)
        self.name = f"roofline-{kind}-calibrated"

    @staticmethod
    def fit(db: ProfileDB, min_points: int = 3) -> "CalibratedRoofline":
        """Fit each family with enough timed ops; the others use the fit over all timed ops."""
        points: dict[str, list[tuple[float, float, float]]] = {f: [] for f in FAMILIES}
        views = []
        for fam, flops, moved, t in timed_entries(db):
            if fam == "view":
                views.append(t)
            else:
                points[fam].append((flops, moved, t))
        everything = [p for ps in points.values() for p in ps]
        if len(everything) < min_points:
            raise EinsatError(f"the profile has {len(everything)} timed kernels; a calibration needs "
                              f"{min_points}")
        kind = db.device.get("kind", "gpu")
        base = datasheet(kind)
        prior = Roofline.of(base)
        overall = fit_roofline(*zip(*everything), prior=prior)
        fits = {f: fit_roofline(*zip(*ps), prior=prior) if len(ps) >= min_points else overall
                for f, ps in points.items()}
        view_us = max(float(np.median(views)) if views else 0.0, base.view_us)
        return CalibratedRoofline(fits, view_us, kind)

    def node_cost(self, op, attrs, ins, outs) -> float:
        if opdef(op).source:
            return 0.0
        fam = family(op)
        if fam == "view":
            return self.view_us
        split = separate_epilogue(op, attrs, ins, outs)
        if split is not None:  # the vendor call, then the runtime's element-wise kernel
            (core, core_attrs, core_ins, core_outs), (flops, moved) = split
            return self.node_cost(core, core_attrs, core_ins, core_outs) + float(
                self.families["kernel"].time(flops, moved))
        flops, moved = flops_and_bytes(op, attrs, ins, outs)
        return float(self.families[fam].time(flops, moved))


class OptimisticBound(CostModel):
    """What an unmeasured op might cost at best: the calibrated roofline's guess, or less where
    the op's family has run faster than the fit (`fit`): at the launch-free roofline of the
    fastest rates its family's timed ops reached. `measure.choose` extracts on it to find the
    candidates worth timing (an op the calibrated fit overestimates is never chosen, so never
    timed: einnet_conv5x5's 1×5 convolution to 5 channels, 3.9× its input, stayed a guess)."""

    QUANTILE = 0.9  # of the timed ops' rates: the fastest few may be noise
    MIN_US = 10.0   # shorter timings are mostly the call's overhead: their rates say little

    def __init__(self, calibrated: CostModel, families: Mapping[str, Roofline]):
        self.calibrated = calibrated
        self.families = dict(families)
        self.name = f"{getattr(calibrated, 'name', 'roofline')}-optimistic"

    @staticmethod
    def fit(db: ProfileDB, calibrated: CostModel) -> "OptimisticBound":
        rates: dict[str, list[tuple[float, float]]] = {f: [] for f in FAMILIES}
        for fam, flops, moved, t in timed_entries(db):
            if fam != "view" and t >= OptimisticBound.MIN_US:
                rates[fam].append((flops / t, moved / t))

        def bound(points):
            if not points:
                return None
            f, b = np.quantile(np.asarray(points), OptimisticBound.QUANTILE, axis=0)
            return Roofline(0.0, max(float(f), 1e-9), max(float(b), 1e-9))

        overall = bound([p for ps in rates.values() for p in ps])
        return OptimisticBound(calibrated, {f: r for f in FAMILIES if (r := bound(rates[f]) or overall)})

    def node_cost(self, op, attrs, ins, outs) -> float:
        guess = self.calibrated.node_cost(op, attrs, ins, outs)
        fam = family(op)
        if fam not in self.families:
            return guess
        flops, moved = flops_and_bytes(op, attrs, ins, outs)
        return min(guess, float(self.families[fam].time(flops, moved)))


CALIBRATION_VERSION = 2  # raise when the fit changes (its form, families or priors): kept fits are then refitted


def calibration_key(db: ProfileDB) -> str:
    """What a calibration was fitted to: the fit's version, the profile's mode and its entries
    (their keys and times)."""
    h = hashlib.sha256(f"{CALIBRATION_VERSION};{db.mode};".encode())
    for key in sorted(db.entries):
        e = db.entries[key]
        h.update(f"{key}={e.get(db.mode, e['us'])};".encode())
    return h.hexdigest()[:16]


def calibrated_fallback(db: ProfileDB, kind: str) -> CostModel:
    """The calibrated roofline of `db`, or the prior of `kind` while too few ops are measured.

    The fit (a least-squares fit per op family: about a second) is kept in the profile's
    `method["calibration"]` with the key of what it was fitted to, so a profile saved after it
    (a committed GPU profile, the CPU target's cache) is rebuilt, not fitted again."""
    key = calibration_key(db)
    kept = db.method.get("calibration")
    if isinstance(kept, Mapping) and kept.get("key") == key and set(kept.get("families", ())) == set(FAMILIES):
        try:
            families = {f: Roofline(*map(float, r)) for f, r in kept["families"].items()}
            return CalibratedRoofline(families, float(kept["view_us"]), kind)
        except (KeyError, TypeError, ValueError):  # a damaged record: fitted again below
            pass
    try:
        fit = CalibratedRoofline.fit(db)
    except EinsatError:
        return RooflineCost(datasheet(kind))
    db.method = {**db.method, "calibration": {
        "key": key, "view_us": fit.view_us,
        "families": {f: [r.launch_us, r.flops_per_us, r.bytes_per_us] for f, r in fit.families.items()}}}
    return fit


def load_profile(db: ProfileDB | str | os.PathLike) -> ProfileDB:
    """A ProfileDB from itself, a path, or a device kind with a committed profile."""
    if isinstance(db, ProfileDB):
        return db
    path = committed_profile(str(db)) or os.fspath(db)
    if not os.path.exists(path):
        raise EinsatError(f"no profile {db!r}: neither a file nor a committed device profile")
    return ProfileDB.load(path)


class MeasuredCost(CostModel):
    """Measured times (µs), and a fallback model for the signatures the profile lacks.

    `db` is a `ProfileDB`, a path, or a device kind with a committed profile; or any object with
    `lookup(op, attrs, ins, outs) -> float | None` (µs, None when not measured), which then needs
    an explicit `fallback`. The fallback defaults to the roofline calibrated on the profile.
    Measured times are clamped to at least the fallback's view cost, so that the positivity
    contract holds. `mode` picks the measured time: "warm_us" (per op inside a whole-program
    CUDA graph, inputs L2-resident: the default, what end-to-end runs see) or "us" (cold L2).
    """

    def __init__(self, db, fallback: CostModel | None = None, mode: str = "warm_us", name: str | None = None):
        if not hasattr(db, "lookup"):
            db = load_profile(db)
        if isinstance(db, ProfileDB):
            if mode not in MODES:
                raise EinsatError(f"unknown profile mode {mode!r}; choose one of {MODES}")
            db.mode = mode
            fallback = fallback or CalibratedRoofline.fit(db)
        elif fallback is None:
            raise EinsatError(f"MeasuredCost of {db!r} needs a fallback model (only a ProfileDB calibrates one)")
        self.db = db
        self.fallback = fallback
        self._neighbours: ConvNeighbours | None = None  # built on the first unmeasured convolution
        kind = db.device.get("kind", "gpu") if isinstance(db, ProfileDB) else fallback.name
        self.name = name or f"measured-{kind}"

    @property
    def label(self) -> str:
        """Whose times: a profile measured on a device (a committed one: not this machine)."""
        device = self.db.device.get("name") or self.db.device.get("kind") if isinstance(self.db, ProfileDB) else None
        return f"{self.name}: profile of {device}" if device else self.name

    def node_cost(self, op, attrs, ins, outs) -> float:
        if opdef(op).source:
            return 0.0
        measured = self.db.lookup(op, attrs, ins, outs)
        floor = getattr(getattr(self.fallback, "device", None), "view_us", 1e-3)
        if measured is None and op in CONV_OPS and isinstance(self.db, ProfileDB):
            if self._neighbours is None:
                self._neighbours = ConvNeighbours.fit(self.db)
            measured = self._neighbours.estimate(op, attrs, ins, outs)
        if measured is None:
            return self.fallback.node_cost(op, attrs, ins, outs)
        return max(float(measured), floor)

    def guessed(self, graph) -> bool:
        """Whether a convolution of `graph` is priced by its nearest measured neighbour
        (`ConvNeighbours`): a guess, whose difference from another guess is no measurement."""
        return any(node.op in CONV_OPS and self.db.lookup(node.op, node.attrs, *graph.node_types(node)) is None
                   for node in graph.nodes)

    def coverage(self, graph) -> float:
        """The fraction of a graph's (profiled-kind) nodes the profile measured."""
        hits = total = 0
        for node in graph.nodes:
            ins, outs = graph.node_types(node)
            if signature_of(node.op, node.attrs, ins) is None:
                continue
            total += 1
            hits += self.db.lookup(node.op, node.attrs, ins, outs) is not None
        return hits / total if total else 1.0


def signatures_of_egraph(data) -> list[Signature]:
    """The distinct signatures of every e-node of an exported e-graph (`EGraphData`)."""
    out: dict[str, Signature] = {}
    for cls in data.classes.values():
        for node in cls.nodes:
            if node.op is None:
                continue
            ins: list[TensorType | None] = [data.classes[c].type if c >= 0 else None for c in node.children]
            try:
                sig = signature_of(node.op, node.attrs, ins)
            except EinsatError:
                continue
            if sig is not None:
                out.setdefault(sig.key, sig)
    return list(out.values())


def export_signatures(data, path) -> int:
    """Write every e-node signature of an e-graph to `path`; returns how many."""
    return write_signatures(path, signatures_of_egraph(data))
