"""TargetCost: the cache file (XDG_CACHE_HOME, keyed by machine and versions), measured entries
and the fallback for the others, and whole-program predictions by fusion group."""

from __future__ import annotations

import pytest

from einsat.cost.model import RooflineCost
from einsat.cost.profile_db import cache_dir, cache_path, cpu_machine, machine_key
from einsat.cost.profiled import CalibratedRoofline, calibrated_fallback
from einsat.cost.target import TargetCost, cpu_model
from einsat.ir.builder import GraphBuilder
from einsat.ir.onnx.export import EXPORT_REVISION
from einsat.ir.registry import Op
from einsat.ir.signature import signature_of
from einsat.ir.types import TensorType

MACHINE = {"kind": "cpu", "backend": "onnxruntime", "name": "test cpu", "onnxruntime": "1.0"}


def sigs(n=4):
    return [signature_of(Op.MATMUL, {}, [TensorType((k, 16)), TensorType((16, 16))]) for k in range(1, n + 1)]


def entry(sig, us):
    return {"us": us, "flops": sig.flops(), "bytes": sig.bytes(), "kernels": 1}


def test_the_cache_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == str(tmp_path / "einsat" / "profiles")
    assert cache_path(MACHINE).startswith(str(tmp_path)) and cache_path(MACHINE).endswith(".json")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as the spec says
    assert cache_dir().endswith(".cache/einsat/profiles")
    assert cpu_model().path.startswith(cache_dir())


def test_the_key_changes_with_the_machine_and_the_versions():
    assert machine_key(MACHINE) == machine_key(dict(reversed(MACHINE.items())))
    assert machine_key(MACHINE) != machine_key({**MACHINE, "onnxruntime": "1.1"})
    assert machine_key(MACHINE) != machine_key({**MACHINE, "name": "another cpu"})
    assert machine_key(MACHINE).startswith("cpu-onnxruntime-")
    m = cpu_machine()
    assert m["kind"] == "cpu" and m["threads"] == 1 and m["cpus"] >= 1 and "onnxruntime" in m
    assert m["export"] == EXPORT_REVISION  # ops exported otherwise are timed anew
    assert machine_key(m) != machine_key({**m, "export": EXPORT_REVISION - 1})
    assert m["spinning"] is False  # timed without spin-waiting (runtime.profiler.ort_session)
    assert machine_key(m) != machine_key({**m, "spinning": True})  # entries timed spinning are not reused


def test_the_key_is_the_running_libraries_even_when_their_metadata_cannot_be_read(monkeypatch):
    # a package manager rewriting the environment's dist-info made metadata.version fail now and
    # then: the versions read "absent", the key changed in mid-run, and a second model in the same
    # process found none of the entries the first had just measured (predict_bench at e6e6741)
    from importlib import metadata

    import numpy as np
    import onnx
    import onnxruntime

    before = cpu_machine()

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    during = cpu_machine()
    assert machine_key(during) == machine_key(before)
    assert (during["onnxruntime"], during["onnx"], during["numpy"]) == (
        onnxruntime.__version__, onnx.__version__, np.__version__)


def test_entries_are_saved_reused_and_refit_the_fallback(tmp_path):
    path = tmp_path / "p.json"
    model = TargetCost("onnxruntime", MACHINE, path)
    assert model.loaded == 0 and isinstance(model.fallback, RooflineCost)  # the prior: nothing measured
    todo = model.missing(sigs())
    assert len(todo) == 4
    model.add({s.key: entry(s, 10.0 * (k + 1)) for k, s in enumerate(todo)}, {"call_overhead_us": 12.0},
              sigs=todo)
    assert isinstance(model.fallback, CalibratedRoofline)
    model.save()
    again = TargetCost("onnxruntime", MACHINE, path)
    assert again.loaded == 4 and not again.missing(sigs()) and again.call_overhead_us == 12.0
    s = sigs()[2]
    assert again.node_cost(s.op, s.attr_dict, list(s.inputs), s.outputs()) == 30.0
    other = TargetCost("onnxruntime", {**MACHINE, "onnxruntime": "2.0"}, path)  # another machine's file
    assert other.loaded == 0 and len(other.missing(sigs())) == 4


def test_an_entry_without_its_signature_is_refused(tmp_path):
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    with pytest.raises(Exception, match="without its signature"):
        model.add({sigs()[0].key: entry(sigs()[0], 1.0)})


def test_a_program_is_predicted_by_its_fusion_groups(tmp_path):
    b = GraphBuilder("mm")
    x = b.input("x", (4, 16))
    y = b.relu(b.add(b.matmul(x, b.weight("w", (16, 16))), b.weight("bias", (16,))))
    g = b.build(b.sigmoid(y))
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    units = model.unit_signatures(g)
    assert [s.op for s in units] == [Op.FUSED_MATMUL, Op.SIGMOID]
    model.add({units[0].key: entry(units[0], 50.0), units[1].key: entry(units[1], 5.0)},
              {"call_overhead_us": 10.0}, sigs=units)
    assert model.graph_cost(g) == pytest.approx(10.0 + 50.0 + 5.0)  # not matmul + add + relu + sigmoid
    assert model.cost_by_op(g) == {"matmul": 50.0, "sigmoid": 5.0}
    assert not (tmp_path / "p.json").exists()  # written by save() only


def test_a_damaged_cache_file_is_measured_again(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    model = TargetCost("onnxruntime", MACHINE, path)
    assert model.loaded == 0 and "cannot read the profile" in model.problem and len(model.missing(sigs())) == 4


def test_the_calibration_is_kept_with_the_profile(tmp_path, monkeypatch):
    """A profile saved with its fitted roofline is not fitted again when nothing changed."""

    model = cpu_model(path=tmp_path / "p.json")
    sigs = [signature_of(Op.RELU, {}, [TensorType((n, 64))]) for n in (8, 64, 512, 4096)]
    model.add({s.key: {"us": 5.0 + s.inputs[0].shape[0] / 100, "flops": s.inputs[0].shape[0] * 64,
                       "bytes": s.inputs[0].shape[0] * 512} for s in sigs}, sigs=sigs)
    model.save()
    fitted = model.fallback
    calls, real = [], CalibratedRoofline.fit
    monkeypatch.setattr(CalibratedRoofline, "fit", staticmethod(lambda db: calls.append(db) or real(db)))
    again = cpu_model(path=tmp_path / "p.json")
    assert calls == [] and again.fallback.families == fitted.families and again.fallback.view_us == fitted.view_us
    again.db.entries[sigs[0].key]["us"] = 50.0  # another profile: fitted anew
    assert calibrated_fallback(again.db, "cpu") and len(calls) == 1


def test_weights_beyond_the_cache_cost_their_streaming(tmp_path):
    """A program whose weights exceed the cache pays at least each unit's weights over the
    memory's bandwidth; one whose weights fit pays the units' one-node (hot-cache) times."""
    b = GraphBuilder("fc")
    g = b.build(b.matmul(b.input("x", (1, 512)), b.weight("w", (512, 512))))
    model = cpu_model(path=tmp_path / "p.json")
    (sig,) = model.unit_signatures(g)
    model.add({sig.key: {"us": 40.0, "flops": 1, "bytes": 1}}, {"call_overhead_us": 5.0, "stream_bytes_per_us": 1000.0,
                                                                 "cache_bytes": 2 ** 30}, sigs=[sig])
    assert model.graph_cost(g) == pytest.approx(45.0)
    model.db.method["cache_bytes"] = 2 ** 16
    assert model.graph_cost(g) == pytest.approx(5.0 + 512 * 512 * 4 / 1000.0)


def test_onnxruntime_runs_views_as_kernels_and_the_roofline_folds_them(tmp_path):
    """PET's pre-filter charges a mutant its views on onnxruntime only (`CostModel.views_run`)."""
    assert cpu_model(path=tmp_path / "p.json").views_run
    assert not TargetCost("cupy", {"kind": "h100"}, tmp_path / "g.json").views_run
    assert not RooflineCost("h100").views_run


REORDERED = {"ReorderInput": 0.1, "Conv": 0.6, "ReorderOutput": 0.2, "Add": 0.05, "Relu": 0.05}


def conv_chain(branch: bool):
    """x -> conv+relu (c1) -> conv+residual(c1)+relu -> y; with `branch`, c1 also goes to a
    reshape, which takes it in the plain layout."""
    b = GraphBuilder("chain")
    x = b.input("x", (1, 16, 8, 8))
    c1 = b.relu(b.conv(x, b.weight("w1", (16, 16, 3, 3)), padding=(1, 1, 1, 1)))
    y = b.relu(b.add(b.conv(c1, b.weight("w2", (16, 16, 3, 3)), padding=(1, 1, 1, 1)), c1))
    outs = [y, b.reshape(c1, shape=(16, 64))] if branch else [y]
    return b.build(*outs)


def test_reorders_between_blocked_units_are_not_charged(tmp_path):
    """onnxruntime keeps its blocked layout between two convolutions: the first does not reorder
    its output, the second neither reorders its input nor runs the residual Add and the ReLU
    apart (its one-node session did all of that); a graph input and a graph output are
    reordered, and so is a value that a reshape also reads."""
    model = cpu_model(path=tmp_path / "p.json")
    g = conv_chain(branch=False)
    units = model.units(g)
    assert [u.op for u in units] == [Op.FUSED_CONV, Op.FUSED_CONV]
    sigs = model.unit_signatures(g)
    model.add({s.key: {"us": 100.0, "flops": 1, "bytes": 1, "kernel_share": REORDERED} for s in sigs},
              {"call_overhead_us": 10.0, "node_overhead_us": 0.0}, sigs=sigs)
    assert model.layout_savings_us(g, units) == pytest.approx([20.0, 10.0 + 5.0 + 5.0])
    assert model.graph_cost(g) == pytest.approx(10.0 + 200.0 - 40.0)

    g2 = conv_chain(branch=True)
    units2 = [u for u in model.units(g2) if not u.constant]
    reshape = signature_of(Op.RESHAPE, dict(units2[-1].attrs), list(units2[-1].ins))
    model.add({reshape.key: {"us": 1.0, "flops": 1, "bytes": 1}}, sigs=[reshape])
    assert model.layout_savings_us(g2, units2)[:2] == pytest.approx([0.0, 20.0])  # c1 is reordered for the reshape

    for s in sigs:  # entries without a layout change save nothing
        model.db.entries[s.key]["kernel_share"] = {"FusedConv": 1.0}
    assert model.layout_savings_us(g, units) == [0.0, 0.0]


def test_a_layout_entry_without_kernel_shares_is_measured_again(tmp_path):
    """A convolution entry from before entries kept their kernels' shares is missing on
    onnxruntime; a matmul's is not, nor is a convolution's on another target."""
    g = conv_chain(branch=False)
    model = cpu_model(path=tmp_path / "p.json")
    conv_sigs, mm = model.unit_signatures(g), sigs(1)
    model.add({s.key: entry(s, 5.0) for s in [*conv_sigs, *mm]}, sigs=[*conv_sigs, *mm])
    assert {s.key for s in model.missing([*conv_sigs, *mm])} == {s.key for s in conv_sigs}
    cupy = TargetCost("cupy", {**MACHINE, "backend": "cupy"}, tmp_path / "q.json")
    cupy.add({s.key: entry(s, 5.0) for s in conv_sigs}, sigs=conv_sigs)
    assert cupy.missing(conv_sigs) == [] and cupy.layout_ops == frozenset()


def shared_model(tmp_path, g):
    """A CPU model whose every conv unit of `g` took 100 µs with REORDERED's shares (no dispatch)."""
    model = cpu_model(path=tmp_path / "p.json")
    sigs = [s for s in model.unit_signatures(g) if s.op in (Op.CONV, Op.FUSED_CONV)]
    model.add({s.key: {"us": 100.0, "flops": 1, "bytes": 1, "kernel_share": REORDERED} for s in sigs},
              {"call_overhead_us": 10.0, "node_overhead_us": 0.0, "nchwc_block": 8}, sigs=sigs)
    return model


def savings(model, g) -> list:
    """(op, µs saved) per non-constant unit."""
    units = model.units(g)
    return [(u.op, s) for u, s in zip(units, model.layout_savings_us(g, units)) if not u.constant]


def branches(channels: int):
    """Two convolutions of x concatenated along the channels, a third convolution after."""
    b = GraphBuilder("branches")
    x = b.input("x", (1, 16, 8, 8))
    c1 = b.conv(x, b.weight("w1", (channels, 16, 1, 1)))
    c2 = b.conv(x, b.weight("w2", (channels, 16, 1, 1)))
    cat = b.concat(c1, c2, axis=1)
    return b.build(b.conv(cat, b.weight("w3", (16, 2 * channels, 1, 1))))


def test_a_concat_of_whole_blocks_carries_the_layout(tmp_path):
    """A Concat of blocked inputs whose channels fill whole blocks stays blocked: the branches do
    not reorder their outputs, the convolution after it not its input; with 12 channels a branch
    (not a multiple of 8) onnxruntime reorders around the Concat, and the model charges that."""
    g = branches(16)
    model = shared_model(tmp_path, g)
    assert savings(model, g) == [(Op.CONV, 20.0), (Op.CONV, 20.0), (Op.CONCAT, 0.0), (Op.CONV, 10.0)]
    g12 = branches(12)
    model12 = shared_model(tmp_path / "12", g12)
    assert savings(model12, g12) == [(Op.CONV, 0.0), (Op.CONV, 0.0), (Op.CONCAT, 0.0), (Op.CONV, 0.0)]


def test_a_blocked_chain_that_ends_in_a_plain_op_is_reordered_back(tmp_path):
    """conv+relu -> batchnorm -> reshape: the batchnorm runs blocked, but the reshape takes the
    plain layout, so the reorder back runs (charged to the conv); before a global pooling it is
    of one pixel a channel, and taken off."""
    def program(tail):
        b = GraphBuilder("tail")
        x = b.input("x", (1, 16, 8, 8))
        y = b.relu(b.conv(x, b.weight("w", (16, 16, 3, 3)), padding=(1, 1, 1, 1)))
        y = b.batchnorm(y, *(b.weight(n, (16,)) for n in ("s", "o", "m", "v")))
        return b.build(tail(b, y))
    plain = program(lambda b, y: b.reshape(y, shape=(16, 64)))
    model = shared_model(tmp_path, plain)
    assert savings(model, plain)[0] == (Op.FUSED_CONV, 0.0)
    pooled = program(lambda b, y: b.flatten(b.global_avgpool(y)))
    assert savings(shared_model(tmp_path / "gap", pooled), pooled)[0] == (Op.FUSED_CONV, 20.0)


def test_a_plain_residual_keeps_the_reorders_and_the_epilogue(tmp_path):
    """A fused convolution whose residual is the (plain) program input: onnxruntime reorders its
    output back to add the residual and activate apart, so the next convolution reorders its
    input; nothing of the middle unit's is taken off but its own input reorder."""
    b = GraphBuilder("plain")
    x = b.input("x", (1, 16, 8, 8))
    c1 = b.relu(b.conv(x, b.weight("w1", (16, 16, 3, 3)), padding=(1, 1, 1, 1)))
    c2 = b.relu(b.add(b.conv(c1, b.weight("w2", (16, 16, 3, 3)), padding=(1, 1, 1, 1)), x))
    g = b.build(b.conv(c2, b.weight("w3", (16, 16, 1, 1))))
    model = shared_model(tmp_path, g)
    assert savings(model, g) == [(Op.FUSED_CONV, 20.0), (Op.FUSED_CONV, 10.0), (Op.CONV, 0.0)]


def test_a_weight_computed_from_weights_is_no_input_of_the_unit(tmp_path):
    """A convolution whose kernel is a reshape of a stored weight (folded when onnxruntime loads
    the model) saves what it saves with a stored kernel: the reshape is no plain input."""
    def program(reshaped: bool):
        b = GraphBuilder("folded")
        x = b.input("x", (1, 16, 8, 8))
        w2 = b.reshape(b.weight("flat", (16 * 16 * 9,)), shape=(16, 16, 3, 3)) if reshaped else \
            b.weight("w2", (16, 16, 3, 3))
        c1 = b.relu(b.conv(x, b.weight("w1", (16, 16, 3, 3)), padding=(1, 1, 1, 1)))
        return b.build(b.relu(b.add(b.conv(c1, w2, padding=(1, 1, 1, 1)), c1)))
    stored, folded = program(False), program(True)
    model = shared_model(tmp_path, stored)
    assert [s for _, s in savings(model, stored)] == pytest.approx([20.0, 20.0])
    assert [s for _, s in savings(model, folded)] == pytest.approx([20.0, 20.0])
    assert model.graph_cost(folded) == pytest.approx(model.graph_cost(stored))


def test_an_entry_whose_shares_could_not_be_taken_is_not_measured_again(tmp_path):
    """An entry with empty shares (the kernel profile failed) and a stale entry that failed to
    be measured again are not missing: `missing` cannot ask for them forever."""
    g = conv_chain(branch=False)
    model = cpu_model(path=tmp_path / "p.json")
    first = model.unit_signatures(g)[0]
    model.add({first.key: {**entry(first, 5.0), "kernel_share": {}}}, sigs=[first])
    assert model.missing([first]) == []
    stale = signature_of(Op.CONV, {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
                         [TensorType((1, 8, 4, 4)), TensorType((8, 8, 1, 1))])
    model.add({stale.key: entry(stale, 5.0)}, sigs=[stale])
    assert model.missing([stale]) == [stale]
    model.add({}, failures={stale.key: "RuntimeError: no"})
    assert model.missing([stale]) == []


def test_the_machines_figures_are_the_median_of_the_last_runs(tmp_path):
    """Each profiling run measures the call overhead, a node's dispatch and the memory's
    bandwidth again; one run under a passing load does not move the model: it keeps the median
    of the last five runs' figures (other method keys: the last run's)."""
    model = cpu_model(path=tmp_path / "p.json")
    for bandwidth, overhead in ((100.0, 30.0), (10.0, 90.0), (120.0, 40.0)):
        model.add({}, {"stream_bytes_per_us": bandwidth, "call_overhead_us": overhead, "cache_bytes": bandwidth})
    assert model.db.method["stream_bytes_per_us"] == 100.0 and model.call_overhead_us == 40.0
    assert model.db.method["cache_bytes"] == 120.0
    for _ in range(5):
        model.add({}, {"stream_bytes_per_us": 10.0})
    assert model.db.method["stream_bytes_per_us"] == 10.0 and len(model.db.method["stream_bytes_per_us_history"]) == 5
    model.save()
    assert cpu_model(path=tmp_path / "p.json").db.method["stream_bytes_per_us_history"] == [10.0] * 5


def test_two_runs_saving_one_cache_keep_each_others_entries(tmp_path):
    """Two models of one machine profile different signatures into one cache file: each save
    merges what the other saved (the saver's entry wins where both measured a signature)."""
    path = tmp_path / "p.json"
    a, b = cpu_model(path=path), cpu_model(path=path)
    s1, s2, s3 = sigs(3)
    a.add({s1.key: entry(s1, 1.0), s3.key: entry(s3, 3.0)}, sigs=[s1, s3])
    b.add({s2.key: entry(s2, 2.0), s3.key: entry(s3, 30.0)}, failures={"x": "RuntimeError"}, sigs=[s2, s3])
    a.save()
    b.save()
    again = cpu_model(path=path)
    assert {k: e["us"] for k, e in again.db.entries.items()} == {s1.key: 1.0, s2.key: 2.0, s3.key: 30.0}
    assert again.db.failures == {"x": "RuntimeError"}
    other = TargetCost("onnxruntime", {**MACHINE, "onnxruntime": "9"}, path)  # another machine: replaces it
    other.add({s1.key: entry(s1, 5.0)}, sigs=[s1])
    other.save()
    assert set(TargetCost("onnxruntime", {**MACHINE, "onnxruntime": "9"}, path).db.entries) == {s1.key}


def test_a_model_takes_what_worker_processes_saved(tmp_path):
    """A partitioned run's workers profile their pieces on copies of the model and save them to
    the cache file; the run's own model takes their entries, failures and machine figures."""
    path = tmp_path / "p.json"
    run, worker = cpu_model(path=path), cpu_model(path=path)
    s1, s2 = sigs(2)
    run.add({s1.key: entry(s1, 1.0)}, sigs=[s1])
    worker.add({s1.key: entry(s1, 9.0), s2.key: entry(s2, 2.0)}, {"call_overhead_us": 7.0},
               failures={"x": "RuntimeError: no"}, sigs=[s1, s2])
    worker.save()
    assert run.refresh() == 1 and run.refresh() == 0
    assert {k: e["us"] for k, e in run.db.entries.items()} == {s1.key: 1.0, s2.key: 2.0}  # its own kept
    assert run.db.failures == {"x": "RuntimeError: no"} and run.call_overhead_us == 7.0
    assert run.missing([s1, s2]) == []


def test_failures_recorded_with_other_inputs_are_timed_again(tmp_path):
    """A failure in a profile from before the profiler drew valid indices (GPT-2's GatherND:
    `profile_db.INPUTS_REVISION`) is forgotten on load and the signature timed again; one
    recorded now is kept."""
    import json
    path = tmp_path / "p.json"
    model = cpu_model(path=path)
    (s,) = sigs(1)
    model.add({}, failures={s.key: "InvalidArgument: invalid index found, index = 3"})
    model.save()
    assert cpu_model(path=path).missing([s]) == []
    data = json.loads(path.read_text())
    del data["method"]["inputs_revision"]  # as an older einsat wrote it
    path.write_text(json.dumps(data))
    old = cpu_model(path=path)
    assert old.db.failures == {} and old.missing([s]) == [s]
    old.add({}, failures={"y": "RuntimeError"})
    old.save()  # the stale failure on disk is not merged back either
    assert cpu_model(path=path).db.failures == {"y": "RuntimeError"}


def test_an_entry_timed_under_load_is_timed_again_and_the_quieter_timing_kept(tmp_path):
    from einsat.cost.target import LOADED_REF, QUIET_REFS, RETIMES
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    ss = sigs(QUIET_REFS + 2)
    quiet, busy = ss[:-1], ss[-1]
    model.add({s.key: {**entry(s, 10.0), "ref_us": 80.0} for s in quiet}, sigs=quiet)
    model.add({busy.key: {**entry(busy, 300.0), "ref_us": 80.0 * LOADED_REF * 2}}, sigs=[busy])
    assert model.quiet_ref_us() == 80.0
    assert model.missing(ss) == [busy]  # its batch's reference ran 3x the quiet one's
    model.add({busy.key: {**entry(busy, 500.0), "ref_us": 80.0 * LOADED_REF * 3}}, sigs=[busy])  # busier still
    assert model.db.entries[busy.key]["us"] == 300.0 and model.db.entries[busy.key]["retimed"] == 1
    assert model.missing(ss) == [busy]
    model.add({busy.key: {**entry(busy, 20.0), "ref_us": 82.0}}, sigs=[busy])  # quiet now: this one is kept
    assert model.db.entries[busy.key]["us"] == 20.0 and model.db.entries[busy.key]["retimed"] == RETIMES
    assert model.missing(ss) == []


def test_an_entry_is_timed_again_at_most_retimes_times(tmp_path):
    from einsat.cost.target import LOADED_REF, QUIET_REFS, RETIMES
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    ss = sigs(QUIET_REFS + 2)
    model.add({s.key: {**entry(s, 10.0), "ref_us": 80.0} for s in ss[:-1]}, sigs=ss[:-1])
    for _ in range(RETIMES + 1):
        model.add({ss[-1].key: {**entry(ss[-1], 300.0), "ref_us": 80.0 * LOADED_REF * 2}}, sigs=[ss[-1]])
    assert model.db.entries[ss[-1].key]["retimed"] == RETIMES
    assert model.missing(ss) == []  # the machine stays busy: its timing stands


def test_without_enough_references_no_entry_counts_as_timed_under_load(tmp_path):
    from einsat.cost.target import QUIET_REFS
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    ss = sigs(QUIET_REFS - 1)
    model.add({s.key: {**entry(s, 10.0), "ref_us": 80.0 * (1 + k)} for k, s in enumerate(ss)}, sigs=ss)
    assert model.quiet_ref_us() is None and model.missing(ss) == []


def test_an_entry_timed_again_for_its_kernel_shares_takes_them_however_loaded(tmp_path):
    from einsat.cost.target import QUIET_REFS
    model = TargetCost("onnxruntime", MACHINE, tmp_path / "p.json")
    conv = signature_of(Op.CONV, {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
                        [TensorType((1, 8, 8, 8)), TensorType((8, 8, 1, 1))])
    ss = sigs(QUIET_REFS)
    model.add({s.key: {**entry(s, 10.0), "ref_us": 80.0} for s in ss}, sigs=ss)
    model.add({conv.key: {**entry(conv, 30.0), "ref_us": 80.0}}, sigs=[conv])  # before entries kept shares
    assert model.missing([conv]) == [conv]
    model.add({conv.key: {**entry(conv, 40.0), "ref_us": 90.0, "kernel_share": {"Conv": 1.0}}}, sigs=[conv])
    assert model.db.entries[conv.key]["kernel_share"] == {"Conv": 1.0} and model.missing([conv]) == []
