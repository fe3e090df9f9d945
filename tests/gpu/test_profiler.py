"""The profiler's host-side pieces (inputs, replicated programs, the CLI without a GPU), and,
on a GPU, timings that make sense."""

from __future__ import annotations

import numpy as np
import pytest

import einsat
from einsat.cli import main
from einsat.gpu.profiler import replicated
from einsat.ir.registry import Op
from einsat.ir.signature import signature_of, write_signatures
from einsat.ir.types import TensorType
from einsat.runtime import random_inputs


def gather_sig():
    return signature_of(Op.GATHER, {"axis": 1}, [TensorType((4, 7)), TensorType((3, 2), np.int64)])


def test_replicated_program_repeats_the_op():
    g = replicated(gather_sig().graph(), 4)
    assert [n.op for n in g.nodes] == [Op.GATHER] * 4 and len(g.outputs) == 1
    feeds = random_inputs(g, np.random.default_rng(0))  # every copy's indices are valid
    assert all(feeds[n.inputs[1]].max() < 7 for n in g.nodes)


def test_profile_command_without_a_gpu_fails_cleanly(tmp_path, capsys):
    """Without CuPy (the main venv), or with CuPy but no driver or device (make test-gpu-static)."""
    from tests.gpu.conftest import device_available
    if device_available() is None:
        pytest.skip("a CUDA device is present: this checks the message on machines without one")
    sigs = tmp_path / "s.json"
    write_signatures(sigs, [gather_sig()])
    out = tmp_path / "p.json"
    assert main(["profile", str(sigs), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs CuPy" in err or "needs a CUDA device" in err or "no NVIDIA GPU" in err, err
    assert not out.exists()


def test_profile_and_check_on_a_machine_without_a_gpu_say_so(tmp_path, capsys, monkeypatch):
    """No driver at all: the message says there is no GPU and what to do on this machine, not to install
    CuPy (which would not help). The driver's absence is planted, so this holds on any machine."""
    from einsat.gpu import device

    monkeypatch.setattr(device, "cuda_driver_present", lambda: False)
    sigs = tmp_path / "s.json"
    write_signatures(sigs, [gather_sig()])
    model = tmp_path / "m.onnx"
    einsat.save_onnx(gather_sig().graph(), model)
    for command in (["profile", str(sigs), "--out", str(tmp_path / "p.json")], ["check", str(model), str(model)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("einsat: error: this machine has no NVIDIA GPU") and "--cost cpu" in err, err
        assert "pip install" not in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.gpu
def test_profiler_times_scale_with_work():
    from einsat.cost.profile_db import ProfileDB
    from einsat.gpu.profiler import Profiler
    small = signature_of(Op.MATMUL, {}, [TensorType((256, 256)), TensorType((256, 256))])
    big = signature_of(Op.MATMUL, {}, [TensorType((2048, 2048)), TensorType((2048, 2048))])
    view = signature_of(Op.TRANSPOSE, {"perm": (1, 0)}, [TensorType((64, 64))])
    db = Profiler(reps=20).profile([small, big, view], ProfileDB())
    assert not db.failures
    e_small, e_big, e_view = (db.entries[s.key] for s in (small, big, view))
    assert e_view["kernels"] == 0 and e_view["us"] == 0.0
    assert e_big["us"] > 10 * e_small["us"] > 0 and e_big["warm_us"] > 0
    assert db.device["kind"] in ("h100", "h200") or db.device["name"]
    # 2·2048³ FLOPs in strict fp32 cannot beat the fp32 peak (~67 TFLOP/s on Hopper)
    assert 2 * 2048**3 / (e_big["us"] * 1e-6) < 80e12


def test_warm_copies_share_the_first_input_and_read_their_own_others():
    g = signature_of(Op.MATMUL, {}, [TensorType((8, 16)), TensorType((16, 4))]).graph()
    r = replicated(g, 3)
    firsts = {n.inputs[0] for n in r.nodes}
    seconds = [n.inputs[1] for n in r.nodes]
    assert firsts == {g.nodes[0].inputs[0]} and len(set(seconds)) == 3
    assert all(r.types[s] == g.types[g.nodes[0].inputs[1]] for s in seconds)
    feeds = random_inputs(r, np.random.default_rng(0))
    assert set(feeds) == set(r.inputs) and len(feeds) == 4


def _one_convolution():
    """A `Cudnn` binding over a stand-in library answering for one convolution: each algorithm's
    workspace size (None: not supported) and, through `time_ms`, its time."""
    import ctypes

    from einsat.gpu.kernels.cudnn import WORKSPACE_LIMIT, Cudnn, plan_conv
    sizes = {0: 0, 1: 4096, 2: None, 3: WORKSPACE_LIMIT + 1, 4: 1024, 5: 64, 6: None, 7: 8}
    speed = {0: 5.0, 1: 2.0, 4: 3.0, 5: 4.0, 7: 2.5}
    runs = []

    class Lib:  # cuDNN's answers for one convolution, without a device
        def cudnnGetConvolutionForwardWorkspaceSize(self, h, xd, wd, cd, yd, algo, size):
            if sizes[algo] is None:
                return 9  # CUDNN_STATUS_NOT_SUPPORTED
            ctypes.cast(size, ctypes.POINTER(ctypes.c_size_t))[0] = sizes[algo]
            return 0

        def cudnnConvolutionForward(self, h, one, xd, x, wd, w, cd, algo, ws, ws_bytes, zero, yd, y):
            assert ws.value == 0xA000 and ws_bytes == sizes[algo]
            runs.append(algo)
            return 0

    c = Cudnn.__new__(Cudnn)  # the binding without loading the library
    c.lib, c.handle, c._algo, c.choices = Lib(), None, {}, {}
    plan = plan_conv((1, 2, 9, 9), (4, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    strides = (162, 81, 9, 1)
    c._desc = {(plan.key, strides, "float32", False): ("xd", "wd", "cd", "yd")}
    requests = []

    def workspace(n):
        requests.append(n)
        return 0xA000

    def time_ms(fn):
        fn()
        return speed[runs[-1]]

    return c, plan, strides, workspace, time_ms, requests, runs


def test_algorithm_choice_uses_one_workspace_and_records_every_candidate():
    from einsat.gpu.kernels.cudnn import FWD_ALGOS
    c, plan, strides, workspace, time_ms, requests, _ = _one_convolution()
    assert c.choose(plan, strides, np.float32, False, workspace, time_ms, 1, 2, 3) == (1, 4096)
    assert requests == [4096]  # one workspace, the largest candidate's
    rec = c.choices[(plan.key, strides, "float32", False)]
    assert rec["algo"] == 1 and rec["workspace_bytes"] == 4096 and len(rec["candidates_ms"]) == FWD_ALGOS
    assert rec["candidates_ms"][1] == 2.0 and rec["candidates_ms"][2] == "not supported"
    assert "workspace bytes" in rec["candidates_ms"][3]


def test_candidates_far_slower_in_the_screen_are_not_timed_further():
    """A cheap screen first: a candidate over SCREEN_FACTOR times the fastest screened is left
    out (and says so); the rest are timed, and the best of those is chosen, even where the
    screen ranked it otherwise (a multi-kernel algorithm behind its launch gaps)."""
    from einsat.gpu.kernels.cudnn import SCREEN_FACTOR
    c, plan, strides, workspace, time_ms, _, runs = _one_convolution()
    screen = {0: 1.0, 1: 1.5, 4: 3.5, 5: 2.9, 7: 1.2}  # 4 is over 3x the fastest; 1 is timed fastest
    assert SCREEN_FACTOR == 3
    timed = []

    def counted(fn):
        timed.append(None)
        return time_ms(fn)

    def screen_ms(fn):
        fn()
        return screen[runs[-1]]

    assert c.choose(plan, strides, np.float32, False, workspace, counted, 1, 2, 3, screen_ms=screen_ms) == (1, 4096)
    rec = c.choices[(plan.key, strides, "float32", False)]["candidates_ms"]
    assert rec[4].startswith("screened out: 3.5 ms alone") and len(timed) == 4
    assert {a: rec[a] for a in (0, 1, 5, 7)} == {0: 5.0, 1: 2.0, 5: 4.0, 7: 2.5}


def test_entries_whose_cudnn_choice_was_timed_otherwise_are_profiled_again():
    from einsat.cost.profile_db import ProfileDB
    from einsat.gpu.device import CHOICE_TIMER
    from einsat.gpu.profiler import Profiler, stale
    sigs = [signature_of(Op.RELU, {}, [TensorType((4, k))]) for k in (1, 2, 3, 4)]
    db = ProfileDB()
    db.device = {"name": "a GPU"}
    db.add(sigs[0], us=1.0)                                                   # no convolution: kept
    db.add(sigs[1], us=1.0, cudnn=[{"algo": 0}])                              # chosen call by call: stale
    db.add(sigs[2], us=1.0, cudnn=[{"algo": 1, "timer": CHOICE_TIMER}])       # chosen as now: kept
    assert [stale(db.entries[s.key]) for s in sigs[:3]] == [False, True, False]
    prof = Profiler.__new__(Profiler)  # no device here: the signatures' timing is replaced
    prof.reps, prof.warmup, prof.copies, prof.flush_bytes = 1, 0, 1, 0
    measured = []
    prof.time_signature = lambda sig: measured.append(sig.key) or {"us": 2.0}
    prof.profile(sigs, db)
    assert measured == [sigs[1].key, sigs[3].key] and db.entries[sigs[1].key]["us"] == 2.0


def _hostless_profiler(time_signature):
    from einsat.gpu.profiler import Profiler
    prof = Profiler.__new__(Profiler)  # no device here: the signatures' timing is replaced
    prof.reps, prof.warmup, prof.copies, prof.flush_bytes = 1, 0, 1, 0
    prof.time_signature = time_signature
    return prof


def test_the_gpu_profiler_runs_through_the_shared_timing_loop():
    """One signature per batch through `runtime.profiler.profile_into`: a signature that fails is
    recorded with its error and the others go on, each line of progress names one signature, and
    the budget leaves the rest unmeasured, as the CPU's profiler does."""
    from einsat.cost.profile_db import ProfileDB
    from einsat.gpu import profiler as gpu_profiler
    from einsat.runtime import profiler as runtime_profiler
    assert gpu_profiler.profile_into is runtime_profiler.profile_into
    sigs = [signature_of(Op.RELU, {}, [TensorType((4, k))]) for k in (1, 2, 3)]

    def timed(sig):
        if sig is sigs[1]:
            raise RuntimeError("no kernel for this")
        return {"us": 3.0, "warm_us": 2.0}

    db, said = ProfileDB(device={"name": "a GPU"}), []
    _hostless_profiler(timed).profile(sigs, db, progress=said.append)
    assert set(db.entries) == {sigs[0].key, sigs[2].key}
    assert db.failures == {sigs[1].key: "RuntimeError: no kernel for this"}
    assert said == [f"[1/3] {sigs[0].key}: 3.00 us cold, 2.00 us warm", f"[2/3] {sigs[1].key}: failed",
                    f"[3/3] {sigs[2].key}: 3.00 us cold, 2.00 us warm"]
    db, said = ProfileDB(device={"name": "a GPU"}), []
    _hostless_profiler(timed).profile(sigs, db, time_budget_s=-1.0, progress=said.append)
    assert not db.entries and said == ["profiling budget of -1 s reached: 3 signatures left unmeasured"]


def test_a_programs_series_is_summarized_by_the_shared_statistics():
    """The median and the 10th/90th percentiles of the events' times, as `runtime.profiler.summarize`
    gives them for the CPU's runners (µs from the events' ms)."""
    import statistics
    ms = [0.010, 0.012, 0.011, 0.030, 0.009, 0.011]
    prof = _hostless_profiler(None)
    prof._events = lambda prog, flush, reps: [t * 1e3 for t in ms]

    class Prog:
        mode, graph_fallback = "graph", None

        def run(self, inputs):
            pass

    out = prof.time_program(Prog(), {})
    us = sorted(t * 1e3 for t in ms)
    assert out["us"] == pytest.approx(statistics.median(us))
    assert out["p10_us"] == pytest.approx(us[0] + 0.5 * (us[1] - us[0]))  # linear interpolation at 10%
    assert out["p90_us"] == pytest.approx(us[4] + 0.5 * (us[5] - us[4]))
    assert out["mode"] == "graph" and out["graph_fallback"] is None
