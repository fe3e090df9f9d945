"""`einsat check` (einsat.gpu.check, einsat.cli.check) on the host emulation of a device: the
outputs really computed and compared there, the timings scripted (so each verdict is known in
advance), the stale profile entries timed again and written back, and the command importing
and running with egglog blocked, as on the GPU machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import einsat
from einsat.cost.profile_db import ProfileDB
from einsat.gpu.check import check_programs, rel_error, stale_signatures
from einsat.gpu.device import CHOICE_TIMER
from einsat.gpu.profiler import stale
from einsat.ir.builder import GraphBuilder
from einsat.ir.signature import signatures_of_graph
from einsat.runtime import random_inputs
from tests.gpu.host_device import HostDevice, library_for

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNG = np.random.default_rng(7)
W1 = (RNG.standard_normal((16, 32)) / 4).astype(np.float32)
W2 = (RNG.standard_normal((32, 8)) / 6).astype(np.float32)


def chain(*weights, name="chain"):
    """x [8, 16] through matmuls by `weights`, then relu, as the output "y"."""
    b = GraphBuilder(name)
    t = b.input("x", (8, 16))
    for k, w in enumerate(weights):
        t = b.matmul(t, b.weight(f"w{k}", w))
    return b.build(b.relu(t, name="y"))


ORIGINAL = chain(W1, W2, name="original")
OPTIMIZED = chain(W1 @ W2, name="folded")            # the two weights folded: one matmul fewer
WRONG = chain(W1 @ W2 + np.float32(0.5), name="wrong")  # a different program with the same interface


def folded_by_recipe():
    """OPTIMIZED as scripts/export_optimized.py packs it (`einsat.runtime.packed`): no weights,
    a recipe making its folded weight "wf" from the input's w0 and w1."""
    from einsat.runtime.packed import FORMAT, digest
    b = GraphBuilder("recipe")
    recipe = b.build(b.matmul(b.input("w0", W1.shape), b.input("w1", W2.shape)), names=["wf"])
    b = GraphBuilder("folded")
    opt = b.build(b.relu(b.matmul(b.input("x", (8, 16)), b.weight("wf", W1 @ W2)), name="y"))
    record = {"format": FORMAT, "name": "chain", "graph_name": "folded", "nodes": opt.nodes,
              "inputs": opt.input_types(), "outputs": opt.outputs, "kept": [], "raw": {}, "recipe": recipe,
              "source_sha": {"w0": digest(W1), "w1": digest(W2)}, "weights_sha": {"wf": digest(W1 @ W2)}}
    return record, opt


@pytest.fixture(scope="module")
def library():
    return library_for([(g, random_inputs(g)) for g in (ORIGINAL, OPTIMIZED, WRONG, folded_by_recipe()[1])])


def device(library):
    return HostDevice(library, streams=True)  # streams: the programs capture and replay graphs


def scripted(times: dict[str, list[float]]):
    """A runner factory whose runners return scripted µs by graph name: the k-th runner built
    for a graph (a fresh compile per block) reads the k-th script of that name, round by round."""
    built: dict[str, int] = {}

    def factory(graph, seed):
        k = built.get(graph.name, 0)
        built[graph.name] = k + 1
        script = iter(times[graph.name][k] if isinstance(times[graph.name][0], list) else times[graph.name])
        return lambda: next(script)
    factory.built = built
    return factory


def jitter(base: float, n: int = 40) -> list[float]:
    return [base * (1 + 0.01 * ((k * 7) % 5 - 2)) for k in range(n)]


def test_a_faster_optimized_program_is_kept_after_a_confirming_block(library):
    runner = scripted({"original": jitter(100.0), "folded": jitter(60.0)})
    r = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=8, warmup=1, runner=runner)
    assert r.verdict == "faster" and r.kept == "optimized" and r.faster
    c = r.comparison
    assert c.rounds == 16 and runner.built == {"original": 2, "folded": 2}  # fresh programs for the second block
    assert c.baseline_ms == pytest.approx(0.1, rel=0.03) and c.candidate_ms == pytest.approx(0.06, rel=0.03)
    assert c.baseline_spread_ms[0] <= c.baseline_ms <= c.baseline_spread_ms[1] and c.wins == 16
    assert r.modes == {"input": "graph", "optimized": "graph"} and r.rel_error < 1e-5 and r.device == "host"
    d = json.loads(json.dumps(r.to_dict()))
    assert d["verdict"] == "faster" and d["comparison"]["rounds"] == 16 and d["comparison"]["speedup"] > 1.6


def test_a_slower_or_undecided_optimized_program_leaves_the_input(library):
    slower = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=8, warmup=1,
                            runner=scripted({"original": jitter(100.0), "folded": jitter(130.0)}))
    assert slower.verdict == "not faster" and slower.kept == "input" and slower.comparison.rounds == 8
    # a hair faster (1%), in every round: beyond noise, but within the 2% margin
    hair = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=8, warmup=1,
                          runner=scripted({"original": jitter(100.0), "folded": jitter(99.0)}))
    assert hair.kept == "input" and hair.comparison.wins == 8
    # undecided: as often slower as faster
    undecided = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=8, warmup=1,
                               runner=scripted({"original": [100.0] * 40,
                                                "folded": [80.0, 120.0] * 20}))
    assert undecided.kept == "input" and undecided.comparison.p_value > 0.05


def test_a_verdict_of_faster_that_the_second_block_does_not_confirm_keeps_the_input(library):
    runner = scripted({"original": [jitter(100.0), jitter(100.0)], "folded": [jitter(60.0), jitter(104.0)]})
    r = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=8, warmup=1, runner=runner)
    assert r.kept == "input" and r.verdict == "not faster" and r.comparison.rounds == 16
    assert r.comparison.candidate_ms < r.comparison.baseline_ms  # pooled, the medians alone would have said faster


def test_different_outputs_keep_the_input_and_nothing_is_timed(library):
    runner = scripted({"original": jitter(100.0), "wrong": jitter(10.0)})
    r = check_programs(ORIGINAL, WRONG, device(library), runner=runner)
    assert r.verdict == "mismatch" and r.kept == "input" and r.comparison is None and r.rel_error > 1e-2
    assert runner.built == {}


def test_programs_of_different_interfaces_are_refused_clearly(library):
    b = GraphBuilder("other")
    other = b.build(b.relu(b.input("x", (8, 16)), name="z"))
    with pytest.raises(einsat.EinsatError, match=r"interface differs.*\['z'\].*\['y'\]"):
        check_programs(ORIGINAL, other, device(library))


def test_relative_error_of_outputs():
    want = np.array([1.0, -4.0, 2.0], np.float32)
    assert rel_error(want + np.float32(0.004), want) == pytest.approx(0.001, rel=1e-3)
    assert rel_error(np.array([1, 2]), np.array([1, 2])) == 0.0
    assert rel_error(np.array([1, 2]), np.array([1, 3])) == float("inf")
    assert rel_error(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    assert rel_error(np.array([np.nan, 1.0]), np.array([0.0, 1.0])) == float("inf")
    assert rel_error(np.zeros((2, 2)), np.zeros(4)) == float("inf")


class RecordingProfiler:
    """`Profiler.profile`'s contract (times what the db lacks or holds stale, into the db), its
    times scripted: records which signatures it was asked to time."""

    def __init__(self):
        self.asked: list[str] = []

    def profile(self, sigs, db, time_budget_s=None, skip_known=True, progress=None):
        for sig in sigs:
            if skip_known and sig.key in db and not stale(db.entries[sig.key]):
                continue
            self.asked.append(sig.key)
            db.add(sig, us=3.0, warm_us=2.0, cudnn=[{"algo": 1, "timer": CHOICE_TIMER}])
        return db


def profile_with_one_stale_entry():
    """A profile of ORIGINAL's signatures: its first matmul's cuDNN-era choice stale, the relu fresh."""
    db = ProfileDB(device={"kind": "host"})
    mm, relu = [s for s in signatures_of_graph(ORIGINAL) if s.op.value in ("matmul", "relu")][:2]
    db.add(mm, us=9.0, warm_us=9.0, cudnn=[{"algo": 0, "timer": "one call at a time"}])
    db.add(relu, us=1.0, warm_us=1.0, cudnn=[{"algo": 0, "timer": CHOICE_TIMER}])
    return db, mm, relu


def test_stale_entries_the_programs_meet_are_timed_again(library):
    db, mm, relu = profile_with_one_stale_entry()
    assert [s.key for s in stale_signatures([ORIGINAL, OPTIMIZED], db)] == [mm.key]
    prof = RecordingProfiler()
    r = check_programs(ORIGINAL, OPTIMIZED, device(library), rounds=4, warmup=1, db=db, profiler=prof,
                       runner=scripted({"original": jitter(100.0), "folded": jitter(60.0)}))
    assert prof.asked == [mm.key] and r.reprofiled == [mm.key] and not r.reprofile_failed
    assert not stale(db.entries[mm.key]) and db.entries[mm.key]["us"] == 3.0
    assert db.entries[relu.key]["us"] == 1.0  # a fresh entry is left as it was


def write_pair(tmp_path, optimized=OPTIMIZED):
    a, b = str(tmp_path / "model.onnx"), str(tmp_path / "model.opt.onnx")
    einsat.save_onnx(ORIGINAL, a)
    einsat.save_onnx(optimized, b)
    return a, b


def test_the_command_writes_the_faster_program_its_verdict_and_the_profile(tmp_path, library, monkeypatch, capsys):
    from einsat import cli
    from einsat.cli import check as cli_check
    from einsat.gpu import check as gpu_check
    a, b = write_pair(tmp_path)
    db, mm, _ = profile_with_one_stale_entry()
    db.save(str(tmp_path / "profile.json"))
    monkeypatch.setattr(cli_check, "make_device", lambda tf32=False: device(library))
    monkeypatch.setattr(gpu_check, "program_runner",
                        lambda g, dev, seed, replays: scripted({"original": jitter(100.0),
                                                                "folded": jitter(60.0)})(g, seed))
    import einsat.gpu.profiler as gpu_profiler
    monkeypatch.setattr(gpu_profiler, "Profiler", lambda dev: RecordingProfiler())
    out = str(tmp_path / "best.onnx")
    rc = cli.main(["check", a, b, "-o", out, "--profile", str(tmp_path / "profile.json"), "--rounds", "6"])
    assert rc == 0, capsys.readouterr()
    assert open(out, "rb").read() == open(b, "rb").read()  # the optimized file itself
    verdict = json.load(open(tmp_path / "best.check.json"))
    assert verdict["verdict"] == "faster" and verdict["kept"] == "optimized" and verdict["device"] == "host"
    assert verdict["comparison"]["rounds"] == 12 and verdict["reprofiled"] == [mm.key]
    assert not stale(ProfileDB.load(str(tmp_path / "profile.json")).entries[mm.key])
    assert "the optimized program is faster" in capsys.readouterr().out


def test_the_command_keeps_the_input_when_the_outputs_differ(tmp_path, library, monkeypatch):
    from einsat import cli
    from einsat.cli import check as cli_check
    a, b = write_pair(tmp_path, WRONG)
    monkeypatch.setattr(cli_check, "make_device", lambda tf32=False: device(library))
    out = str(tmp_path / "best.onnx")
    assert cli.main(["check", a, b, "-o", out, "--no-reprofile"]) == 1
    assert open(out, "rb").read() == open(a, "rb").read()
    assert json.load(open(tmp_path / "best.check.json"))["verdict"] == "mismatch"
    assert cli.main(["check", a, str(tmp_path / "absent.onnx")]) == 2  # a clear error, no traceback


def test_the_command_takes_a_packed_optimized_program(tmp_path, library, monkeypatch):
    import pickle

    from einsat import cli
    from einsat.cli import check as cli_check
    from einsat.gpu import check as gpu_check
    a, _ = write_pair(tmp_path)
    record, opt = folded_by_recipe()
    packed = tmp_path / "model.opt.pkl"
    packed.write_bytes(pickle.dumps(record))
    monkeypatch.setattr(cli_check, "make_device", lambda tf32=False: device(library))
    monkeypatch.setattr(gpu_check, "program_runner",
                        lambda g, dev, seed, replays: scripted({"original": jitter(100.0),
                                                                "folded": jitter(60.0)})(g, seed))
    out = str(tmp_path / "best.onnx")
    assert cli.main(["check", a, str(packed), "-o", out, "--no-reprofile", "--rounds", "5"]) == 0
    verdict = json.load(open(tmp_path / "best.check.json"))
    assert verdict["kept"] == "optimized" and verdict["recipe_inexact"] == [] and verdict["rel_error"] < 1e-5
    written = einsat.load_onnx(out)
    assert [n.op.value for n in written.nodes] == [n.op.value for n in opt.nodes]
    np.testing.assert_array_equal(written.weights["wf"], opt.weights["wf"])
    # a record over other weights is refused, naming the weight
    other = chain(W1 + np.float32(1), W2, name="original")
    einsat.save_onnx(other, str(tmp_path / "other.onnx"))
    assert cli.main(["check", str(tmp_path / "other.onnx"), str(packed), "--no-reprofile"]) == 2
    (tmp_path / "junk.pkl").write_bytes(pickle.dumps([1, 2]))
    assert cli.main(["check", a, str(tmp_path / "junk.pkl"), "--no-reprofile"]) == 2


BLOCKED = """
import importlib.abc, json, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('egglog', 'highspy', 'cupy'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from einsat import cli
from einsat.cli import check
from tests.gpu.host_device import HostDevice, library_for
import einsat
from einsat.runtime import random_inputs
a, b, out = sys.argv[1:4]
graphs = [einsat.load_onnx(p) for p in (a, b)]
library = library_for([(g, random_inputs(g)) for g in graphs])
check.make_device = lambda tf32=False: HostDevice(library, streams=True)
rc = cli.main(['check', a, b, '-o', out, '--rounds', '4', '--replays', '2'])
print(json.dumps({'rc': rc, 'loaded': sorted(m for m in sys.modules if m.split('.')[0] in ('egglog', 'highspy'))}))
"""


def test_the_command_runs_without_egglog(tmp_path):
    """The GPU machine has no egglog: the command imports and runs with it blocked (here on the
    host emulation, timed by the wall clock: either verdict, but the files agree with it)."""
    a, b = write_pair(tmp_path)
    out = str(tmp_path / "best.onnx")
    p = subprocess.run([sys.executable, "-c", BLOCKED, a, b, out], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "loaded": []}
    verdict = json.load(open(tmp_path / "best.check.json"))
    assert verdict["verdict"] in ("faster", "not faster") and verdict["rel_error"] < 1e-5
    assert open(out, "rb").read() == open(b if verdict["kept"] == "optimized" else a, "rb").read()


def test_the_gpu_sessions_check_phase_keeps_verdicts_beside_the_profile(tmp_path, library, monkeypatch):
    """scripts/gpu_session.py's `check` phase: each optimized program's verdict goes into
    verdicts-<kind>.json in the session's folder, and the stale entries met into its profile."""
    import argparse
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_session", os.path.join(ROOT, "scripts", "gpu_session.py"))
    session = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(session)
    s = session.Session(str(tmp_path), 100.0)
    db, mm, _ = profile_with_one_stale_entry()
    path = str(tmp_path / "profile-host.json")
    record = {"name": "folded", "kept_input": False, "modeled": {"before": 3.0, "after": 2.0}}
    verdicts: dict = {}
    import einsat.gpu.profiler as gpu_profiler
    monkeypatch.setattr(gpu_profiler, "Profiler", lambda dev: RecordingProfiler())
    res = session.check_workload(s, record, ORIGINAL, OPTIMIZED, argparse.Namespace(rounds=5, round_reps=2), db,
                                 path, verdicts, device=device(library),
                                 runner=scripted({"original": jitter(100.0), "folded": jitter(120.0)}))
    assert res["verdict"] == "not faster" and res["kept"] == "input" and res["modeled_speedup"] == 1.5
    kept = json.load(open(tmp_path / "verdicts-host.json"))
    assert kept["folded"]["comparison"]["rounds"] == 5 and kept["folded"]["reprofiled"] == [mm.key]
    assert not stale(ProfileDB.load(path).entries[mm.key])
    skipped = session.check_workload(s, {**record, "kept_input": True}, ORIGINAL, ORIGINAL, None, db, path, verdicts)
    assert "skipped" in skipped
    table = session.summary_markdown({"phases": {"check": {"folded": res, "other": skipped}}})
    assert "| folded | not faster | input | 0.100 | 0.120 | 0.83x | 0/5 |" in table


def test_gpu_report_commits_the_verdicts_beside_the_profile_and_tabulates_them(tmp_path, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_report", os.path.join(ROOT, "scripts", "gpu_report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    monkeypatch.setattr(report, "PROFILES_DIR", str(tmp_path / "profiles"))
    os.makedirs(tmp_path / "profiles")
    (tmp_path / "profiles" / "h100.verdicts.json").write_text(json.dumps({"old": {"kept": "input"},
                                                                           "fsrcnn": {"kept": "optimized"}}))
    from einsat.runtime.profiler import judge
    c = judge([100.0 + k for k in range(8)], [120.0 + k for k in range(8)], "cupy (NVIDIA H100)")
    fsrcnn = {"verdict": "not faster", "kept": "input", "comparison": c.to_dict(), "reprofiled": ["a", "b"]}
    (tmp_path / "verdicts-h100.json").write_text(json.dumps({"fsrcnn": fsrcnn}))
    path = report.merge_verdicts(str(tmp_path), "h100")
    merged = json.load(open(path))
    assert path.endswith("h100.verdicts.json") and merged["fsrcnn"]["kept"] == "input" and "old" in merged
    assert report.merge_verdicts(str(tmp_path), "h200") is None
    table = "\n".join(report.check_table({"fsrcnn": fsrcnn, "wrong": {"verdict": "mismatch", "kept": "input"}}))
    assert "| fsrcnn | not faster | input | 0.103 [0.101, 0.106] | 0.123 [0.121, 0.126] | 0.84× | 0/8 |" in table
    assert "| wrong | mismatch | input |" in table and "0 of 1 optimized programs kept" in table
