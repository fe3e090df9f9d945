"""MeasuredCost: measured times where the profile has them, a calibrated roofline elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from einsat.cost.profile_db import ProfileDB
from einsat.cost.profiled import (
    FLOP_SLOPE,
    CalibratedRoofline,
    MeasuredCost,
    Roofline,
    export_signatures,
    family,
    fit_roofline,
)
from einsat.extract.from_graph import egraph_data_from_graph
from einsat.ir.builder import GraphBuilder
from einsat.ir.registry import Op
from einsat.ir.signature import read_signatures, signatures_of_graph

TRUE = Roofline(launch_us=3.0, flops_per_us=40e6, bytes_per_us=2.5e6)  # 40 TFLOP/s, 2.5 TB/s


def synthetic(n, rng, truth=TRUE, noise=0.0):
    flops = 10 ** rng.uniform(3, 11, n)
    moved = 10 ** rng.uniform(3, 9.5, n)
    t = truth.time(flops, moved) * (1 + noise * rng.standard_normal(n))
    return flops, moved, t


def test_fit_recovers_a_known_roofline():
    f, b, t = synthetic(60, np.random.default_rng(0))
    fit = fit_roofline(f, b, t)
    for got, want in zip((fit.launch_us, fit.flops_per_us, fit.bytes_per_us), (3.0, 40e6, 2.5e6)):
        assert got == pytest.approx(want, rel=1e-4)


def test_fit_with_measurement_noise_stays_close():
    f, b, t = synthetic(200, np.random.default_rng(1), noise=0.03)
    fit = fit_roofline(f, b, t)
    assert fit.launch_us == pytest.approx(3.0, rel=0.05)
    assert fit.flops_per_us == pytest.approx(40e6, rel=0.05)
    assert fit.bytes_per_us == pytest.approx(2.5e6, rel=0.05)


def model(batch=2):
    b = GraphBuilder("m")
    x = b.input("x", (batch, 16))
    h = b.relu(b.matmul(x, b.weight("w1", (16, 32))))
    h = b.reshape(h, shape=(batch, 4, 8))
    return b.build(b.softmax(b.matmul(h, b.weight("w2", (8, 8)))))


def profile_of(graph, time_of) -> ProfileDB:
    db = ProfileDB(device={"kind": "h100", "name": "NVIDIA H100 80GB HBM3"})
    for s in signatures_of_graph(graph):
        t = time_of(s)
        db.add(s, us=2 * t, warm_us=t, flops=s.flops(), bytes=s.bytes(), kernels=0 if t == 0 else 1)
    return db


def calibration_profile(rng):
    """Many matmuls and element-wise ops timed with two different rooflines."""
    gemm, other = Roofline(4.0, 30e6, 2e6), Roofline(2.0, 10e6, 3e6)
    db = ProfileDB(device={"kind": "h100"})
    for k in range(40):
        m, n, kk = (int(2 ** v) for v in rng.uniform(0, 11, 3))  # log-uniform: both regimes occur
        b = GraphBuilder("c")
        x = b.input("x", (m, kk))
        y = b.tanh(b.matmul(x, b.input("w", (kk, n))))
        g = b.build(y)
        for s in signatures_of_graph(g):
            roof = gemm if family(s.op) == "gemm" else other
            db.add(s, us=float(roof.time(s.flops(), s.bytes())) * 1.5, warm_us=float(roof.time(s.flops(), s.bytes())),
                   flops=s.flops(), bytes=s.bytes(), kernels=1)
    return db, gemm, other


def test_calibration_fits_each_family():
    db, _, _ = calibration_profile(np.random.default_rng(2))
    cal = CalibratedRoofline.fit(db)
    g = cal.families["gemm"]
    for got, want in zip((g.launch_us, g.flops_per_us, g.bytes_per_us), (4.0, 30e6, 2e6)):
        assert got == pytest.approx(want, rel=1e-3)
    # tanh is memory-bound at any size: its launch and bandwidth are what the timings show
    k = cal.families["kernel"]
    assert (k.launch_us, k.bytes_per_us) == (pytest.approx(2.0, rel=1e-3), pytest.approx(3e6, rel=1e-3))
    assert k.flops_per_us >= 0.5 * 4 / 8 * 3e6  # never so low that tanh would look compute-bound
    assert cal.families["conv"] is not None  # no convolutions: the fit over all kernels


def test_measured_cost_measured_and_fallback():
    db, gemm, other = calibration_profile(np.random.default_rng(3))
    g = model()
    cost = MeasuredCost(db)
    for node in g.nodes:
        ins, outs = g.node_types(node)
        want = db.lookup(node.op, node.attrs, ins, outs)
        got = cost.node_cost(node.op, node.attrs, ins, outs)
        if node.op is Op.RESHAPE:
            assert got == cost.fallback.view_us > 0
        elif want is not None:
            assert got == want
        else:  # not profiled: the calibrated roofline of its family
            roof = gemm if family(node.op) == "gemm" else other
            assert got == pytest.approx(float(roof.time(*_fb(node, ins, outs))), rel=1e-3)
    assert cost.graph_cost(g) > 0


def _fb(node, ins, outs):
    d = node.definition
    return d.flops(ins, outs, node.attrs), d.bytes(ins, outs, node.attrs)


def test_measured_cost_prefers_measurements():
    g = model()
    db, *_ = calibration_profile(np.random.default_rng(4))
    db.merge(profile_of(g, lambda s: 0.0 if s.op is Op.RESHAPE else 7.0))
    cost = MeasuredCost(db)
    mm = g.nodes[0]
    assert cost.node_cost(mm.op, mm.attrs, *g.node_types(mm)) == 7.0
    cost_cold = MeasuredCost(db, mode="us")
    assert cost_cold.node_cost(mm.op, mm.attrs, *g.node_types(mm)) == 14.0
    assert cost.coverage(g) == 1.0


def test_export_signatures_of_an_egraph(tmp_path):
    g = model()
    path = tmp_path / "sigs.json"
    n = export_signatures(egraph_data_from_graph(g), path)
    keys = [s.key for s in read_signatures(path)]
    assert n == len(keys) and sorted(keys) == sorted(s.key for s in signatures_of_graph(g))


def test_device_name_picks_the_committed_profile(tmp_path, monkeypatch):
    from einsat.cost import profile_db
    from einsat.extract import RooflineCost, cost_model
    monkeypatch.setattr(profile_db, "PROFILES_DIR", str(tmp_path))
    assert isinstance(cost_model("h100"), RooflineCost)  # nothing committed: the analytic roofline
    db, *_ = calibration_profile(np.random.default_rng(5))
    db.save(tmp_path / "h100.json")
    model = cost_model("h100")
    assert isinstance(model, MeasuredCost) and model.name == "measured-h100" and len(model.db) == len(db)
    assert isinstance(cost_model("h200"), RooflineCost)


def test_a_committed_profile_carries_its_fit_and_is_fitted_again_only_when_it_changed(tmp_path, monkeypatch):
    from einsat.cost import profile_db
    from einsat.cost import profiled as profiled_mod
    from einsat.extract import cost_model
    monkeypatch.setattr(profile_db, "PROFILES_DIR", str(tmp_path))
    db, *_ = calibration_profile(np.random.default_rng(7))
    fitted = profiled_mod.calibrated_fallback(db, "h100")  # what scripts/gpu_report.py does before saving
    db.save(tmp_path / "h100.json")
    fits = []
    real_fit = profiled_mod.CalibratedRoofline.fit
    monkeypatch.setattr(profiled_mod.CalibratedRoofline, "fit",
                        staticmethod(lambda db, *a, **k: fits.append(len(db)) or real_fit(db, *a, **k)))
    first, second = cost_model("h100"), cost_model("h100")
    assert fits == [] and first is not second and first.db is not second.db  # fresh models, no fit
    assert first.fallback.families == fitted.families and first.fallback.view_us == fitted.view_us
    x = GraphBuilder("g")
    g = x.build(x.relu(x.matmul(x.input("a", (37, 53)), x.input("b", (53, 11)))))
    assert first.graph_cost(g) == MeasuredCost(db, fallback=fitted).graph_cost(g)
    key = next(iter(db.entries))
    db.entries[key]["warm_us"] *= 2  # another profile under the same name: its kept fit no longer holds
    db.save(tmp_path / "h100.json")
    cost_model("h100")
    assert fits == [len(db)]
    profiled_mod.calibrated_fallback(db, "h100")  # fitted and kept again, as gpu_report does
    db.save(tmp_path / "h100.json")
    cost_model("h100")
    assert fits == [len(db), len(db)]
    stale = ProfileDB.load(tmp_path / "h100.json")
    stale.method["calibration"]["families"].pop("conv")  # a fit kept from another set of families
    profiled_mod.calibrated_fallback(stale, "h100")
    assert fits == [len(db)] * 3


def conv_profile(rng, count=60):
    """Convolutions timed by a law no roofline has: 3x3 filters 4x slower per FLOP than 1x1."""
    db = ProfileDB(device={"kind": "h100"})
    truth = {}
    for k in range(count):
        c, f, hw = (int(2 ** v) for v in rng.uniform((3, 3, 3), (8, 8, 6)))
        taps = int(rng.choice([1, 3]))
        b = GraphBuilder("c")
        (s,) = signatures_of_graph(b.build(b.conv(b.input("x", (1, c, hw, hw)), b.input("w", (f, c, taps, taps)),
                                                  padding=taps // 2)))
        us = 5.0 + s.flops() / (1e6 if taps == 3 else 4e6)
        truth[s.key] = us
        db.add(s, us=us, warm_us=us, flops=s.flops(), bytes=s.bytes(), kernels=1)
    return db, truth


def test_an_unmeasured_conv_is_costed_from_its_nearest_measured_one():
    from einsat.cost.profiled import ConvNeighbours
    db, truth = conv_profile(np.random.default_rng(11), count=120)
    model_ = MeasuredCost(db)
    queries, want = conv_profile(np.random.default_rng(13), count=40)  # other shapes, the same law
    near_err, roof_err = [], []
    for key in queries.entries:
        if key in db.entries:
            continue
        sig = queries.signature(key)
        ins, outs = list(sig.inputs), sig.outputs()
        near = model_.node_cost(sig.op, sig.attr_dict, ins, outs)
        assert near == ConvNeighbours.fit(db).estimate(sig.op, sig.attr_dict, ins, outs)
        near_err.append(abs(np.log(near / want[key])))
        roof_err.append(abs(np.log(model_.fallback.node_cost(sig.op, sig.attr_dict, ins, outs) / want[key])))
    assert len(near_err) >= 30 and np.median(near_err) < 0.6 * np.median(roof_err)
    # a measured one is its measurement; too few convolutions of a kind: the roofline
    key, us = next(iter(truth.items()))
    sig = db.signature(key)
    assert model_.node_cost(sig.op, sig.attr_dict, list(sig.inputs), sig.outputs()) == us
    few, _ = conv_profile(np.random.default_rng(12), count=5)
    assert ConvNeighbours.fit(few).kinds == {}


@pytest.mark.saved_results  # predictions against the committed H100 measurements
def test_on_the_h100_profile_neighbours_beat_the_conv_roofline_for_shapes_it_lacks():
    """Each measured convolution predicted from the others, its own shapes left out (as an
    unseen model's would be): the nearest neighbour against the calibrated roofline."""
    from einsat.cost.profile_db import committed_profile
    from einsat.cost.profiled import CONV_OPS, ConvNeighbours
    db = ProfileDB.load(committed_profile("h100"))
    db.mode = "warm_us"
    cal = CalibratedRoofline.fit(db)
    near = ConvNeighbours.fit(db)
    feats, logt, spread = near.kinds["conv"]
    shapes, roof_err = [], []
    for key, e in db.entries.items():
        sig = db.signature(key)
        if sig.op in CONV_OPS and sig.op is not Op.CONV_TRANSPOSE:
            shapes.append((sig.inputs[0].shape, sig.inputs[1].shape))
            roof = cal.node_cost(sig.op, sig.attr_dict, list(sig.inputs), sig.outputs())
            roof_err.append(np.log(roof / e["warm_us"]))
    near_err = []
    for i, q in enumerate(feats):
        d = (((feats - q) / spread) ** 2).sum(axis=1)
        d[[j for j, s in enumerate(shapes) if s == shapes[i]]] = np.inf
        k = int(np.argmin(d))
        near_err.append(logt[k] + FLOP_SLOPE * (q[0] - feats[k, 0]) - logt[i])
    within = lambda errs: float(np.mean(np.abs(np.exp(np.array(errs)) - 1) <= 0.25))  # noqa: E731
    assert within(near_err) >= 2 * within(roof_err)
    assert np.median(np.abs(near_err)) < 0.6 * np.median(np.abs(roof_err))


def test_a_profile_entry_of_an_op_this_einsat_lacks_is_left_out_of_the_fits():
    """A profile file is shared by every einsat on the machine: an entry written by a newer one, of
    an op this one does not have, is skipped by the fits (it raised ValueError and ended the run)."""
    from einsat.cost.profiled import ConvNeighbours
    db, _, _ = calibration_profile(np.random.default_rng(2))
    conv_db, _ = conv_profile(np.random.default_rng(11), count=40)
    want, want_conv = CalibratedRoofline.fit(db).families, ConvNeighbours.fit(conv_db).kinds.keys()
    for d in (db, conv_db):
        entry = dict(next(iter(d.entries.values())))
        d.entries["from-a-newer-einsat"] = {**entry, "signature": {**entry["signature"], "op": "no_such_op"}}
    assert CalibratedRoofline.fit(db).families == want
    assert ConvNeighbours.fit(conv_db).kinds.keys() == want_conv
