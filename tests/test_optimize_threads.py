"""`optimize(cost="cpu", measure=Measure(threads=N))` / `einsat optimize --threads N`: onnxruntime profiles and
measures at the intra-op thread count the program will be deployed with, the CPU profile is kept
per count, and the report says which count was measured."""

from __future__ import annotations

import sys

import pytest

import einsat
import einsat.optimize  # noqa: F401  (the module, for _with_threads)
from einsat.cost.models import cost_model
from einsat.cost.target import cpu_model
from einsat.errors import EinsatError
from einsat.pipeline import Options
from tests.test_optimize_measured import double_transpose

pytest.importorskip("onnxruntime")




def test_the_cpu_profile_is_kept_per_thread_count(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    one, four = cpu_model(), cpu_model(threads=4)
    assert one.threads == 1 and four.threads == 4
    assert one.path != four.path and one.path.startswith(str(tmp_path)) and four.path.startswith(str(tmp_path))
    assert cpu_model(threads=4).path == four.path  # the same count finds the same profile


def test_threads_choose_the_cpu_model_and_refuse_what_they_cannot_set(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pick = sys.modules["einsat.optimize"]._with_threads
    default = cost_model("cpu")
    assert pick(default, None, "cpu") is default and pick(default, 1, "cpu") is default
    three = pick(default, 3, "cpu")
    assert three.target == "onnxruntime" and three.threads == 3 and three.path != default.path
    for bad in (0, -2, 1.5, True):
        with pytest.raises(EinsatError, match="positive number of intra-op threads"):
            pick(default, bad, "cpu")
    with pytest.raises(EinsatError, match="does not measure onnxruntime"):
        pick(cost_model("h100"), 2, "h100")
    with pytest.raises(EinsatError, match="cpu_model\\(threads=2\\)"):
        pick(cpu_model(tmp_path / "p.json"), 2, cpu_model(tmp_path / "p.json"))


def test_sessions_that_profile_and_measure_run_at_the_threads_asked(tmp_path, monkeypatch):
    """Every onnxruntime session the profiler makes (signatures, the fixed references, both
    programs side by side) is built with intra_op_num_threads = 2, as its options say."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from einsat.runtime import backend_onnxruntime
    real = backend_onnxruntime.new_session
    seen: list[int] = []

    def recording(*args, **kwargs):
        session = real(*args, **kwargs)
        if sys._getframe(1).f_globals.get("__name__") == "einsat.runtime.profiler":
            seen.append(session.get_session_options().intra_op_num_threads)
        return session
    monkeypatch.setattr(backend_onnxruntime, "new_session", recording)
    result = einsat.optimize(double_transpose(), cost="cpu",
                             measure=einsat.Measure(threads=2, check_reps=3, profile_s=30))
    r = result.report
    assert len(seen) > 5 and set(seen) == {2}
    assert r.profile["threads"] == 2 and r.profile["path"] == cpu_model(threads=2).path != cpu_model().path
    text = str(r)
    assert "on onnxruntime at 2 intra-op threads:" in text
    if r.measured is not None:  # else the extraction kept the input, and nothing was timed side by side
        assert r.measured["threads"] == 2 and "measured on onnxruntime at 2 intra-op threads" in text


def test_the_command_line_passes_threads(tmp_path, monkeypatch):
    from einsat import cli
    asked = {}

    def fake_optimize(graph, **kwargs):  # what the command asks of optimize, then stop
        asked.update(kwargs)
        raise EinsatError("stopped by the test")
    monkeypatch.setattr(einsat, "optimize", fake_optimize)
    path = tmp_path / "m.onnx"
    einsat.save_onnx(double_transpose(), str(path))
    assert cli.main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--cost", "cpu", "--threads", "4"]) == 2
    assert asked["measure"] == einsat.Measure(threads=4) and asked["cost"] == "cpu"
    assert Options.of(**asked).measuring.threads == 4  # the keywords are the command's Options
