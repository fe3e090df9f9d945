"""`einsat.pipeline.Options`: one record of a run's settings, made alike by the Python API and
the command line, older keyword names kept as aliases, bad values refused with clear errors."""

from __future__ import annotations

import dataclasses
import sys

import pytest

import einsat
from einsat.budget import Budget
from einsat.cli import main, parser
from einsat.cli.optimize import options_of
from einsat.egraph import Limits
from einsat.errors import EinsatError
from einsat.pipeline import Options, Partitioning
from tests.cli.test_optimize import small_model


def command_options(tmp_path, monkeypatch, *flags) -> tuple[Options, dict]:
    """The Options `einsat optimize` builds from `flags`: the keywords it calls `einsat.optimize`
    with (stopped there), and `options_of` on its parsed flags."""
    small_model(tmp_path / "m.onnx")
    asked = {}

    def stop(graph, **keywords):
        asked.update(keywords)
        raise EinsatError("stopped by the test")

    monkeypatch.setattr(einsat, "optimize", stop)
    argv = ["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q", *flags]
    assert main(argv) == 2 and asked
    assert isinstance(asked["budget"], Budget) and asked["progress"] is None  # -q: no display
    return options_of(parser().parse_args(argv)), asked


def test_the_command_line_and_the_api_build_the_same_options(tmp_path, monkeypatch):
    flags = ["--cost", "h200", "--extractor", "greedy", "--budget", "12", "--nodes", "500", "--memory-gb", "2",
             "--profile-budget", "7", "--recheck", "--piece-nodes", "32", "--parallel", "1", "--allow-inconclusive",
             "--precision", "bf16", "--half-io"]
    parsed, asked = command_options(tmp_path, monkeypatch, *flags)
    api = Options.of(cost="h200", extractor="greedy", budget=12, limits=Limits(nodes=500, memory_gb=2),
                     profile_budget=7, recheck=True, verify=True, precision="bf16", half_io=True,
                     partition=Partitioning(piece_nodes=32, workers=1, executor="serial"))
    assert Options.of(**asked) == parsed == api
    assert Options.of(**asked).budget_s == 12.0
    # what einsat.optimize makes of those keywords is what it hands the pipeline
    seen = []
    optimize_module = sys.modules["einsat.optimize"]
    monkeypatch.setattr(optimize_module, "pipeline_run", lambda program, examples, options, split: seen.append(options))
    optimize_module.optimize("m.onnx", **asked)
    assert seen == [api]
    # the defaults agree too: the command asks for a proof, as verify="prove"
    default, _ = command_options(tmp_path, monkeypatch)
    assert default == Options.of(verify="prove") != Options()


def test_older_names_are_aliases(tmp_path, monkeypatch, capsys):
    assert Options.of(time_limit=3) == Options.of(extract_seconds=3) == Options(extract_seconds=3)
    assert Options.of(time_limit=3).extract_seconds == 3 and Options.of(time_limit=3).budget_s is None
    assert Options.of(time_limit=3, extract_seconds=3).extract_seconds == 3  # the same value twice is fine
    with pytest.raises(EinsatError, match="time_limit= is the older name of extract_seconds="):
        Options.of(time_limit=3, extract_seconds=4)
    # on the command line, --time-limit is --budget's older spelling: the whole run's seconds
    old, _ = command_options(tmp_path, monkeypatch, "--time-limit", "9")
    assert "--time-limit is deprecated; use --budget" in capsys.readouterr().err
    new, _ = command_options(tmp_path, monkeypatch, "--budget", "9")
    assert old == new and old.budget_s == 9.0 and old.extract_seconds is None


def test_options_round_trip_through_optimizes_keywords_and_are_frozen():
    o = Options.of(cost="cpu", threads=2, budget=5, verify="prove", check_reps=3, partition=False, seed=4)
    assert Options.of(**o.keywords()) == o
    assert o.replace(seed=5) != o and o.replace(seed=5).seed == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 1
    shared = Budget(5)  # a shared Budget compares by its seconds; its object is kept
    assert Options(budget=shared) == Options(budget=5.0) != Options(budget=6.0)
    assert Options(budget=shared).run_budget() is shared and Options(budget=5).run_budget() is not shared


@pytest.mark.parametrize("keywords,message", [
    ({"extractor": "best"}, "unknown extractor 'best'"),
    ({"verify": "yes"}, "verify= takes True, False or 'prove'"),
    ({"budget": 0}, r"budget= \(--budget, --time-limit\) takes positive seconds, not 0"),
    ({"budget": -1.0}, "budget= .* takes positive seconds"),
    ({"budget": "10"}, "budget= .* takes positive seconds, not '10'"),
    ({"time_limit": -2}, r"extract_seconds= \(time_limit=\) takes non-negative seconds"),
    ({"profile_budget": -1}, "profile_budget= .* takes non-negative seconds"),
    ({"check_reps": 0}, "check_reps= takes a positive number of rounds"),
    ({"threads": 0}, "threads= takes a positive number of intra-op threads"),
    ({"partition": True}, "partition= takes a Partitioning, None or False, not bool"),
    ({"precision": "fp8"}, "unknown precision 'fp8'"),
    ({"half_io": True}, "half_io= .* needs precision 'bf16' or 'fp16', not 'fp32'"),
    ({"limits": {"nodes": 5}}, "limits= takes an einsat.egraph.Limits, not dict"),
    ({"progress": "loud"}, "progress= takes a callable"),
    ({"budgets": 5}, r"unknown option\(s\) \['budgets'\]"),
])
def test_bad_values_are_refused_naming_the_option(keywords, message):
    with pytest.raises(EinsatError, match=message):
        Options.of(**keywords)


def test_optimize_refuses_a_bad_value_before_any_work(monkeypatch):
    optimize_module = sys.modules["einsat.optimize"]
    monkeypatch.setattr(optimize_module, "pipeline_run", lambda *a, **k: pytest.fail("ran with a bad option"))
    with pytest.raises(EinsatError, match="unknown extractor"):
        einsat.optimize("no such file.onnx", extractor="exact")


@pytest.mark.parametrize("flags,message", [
    (["--budget", "0"], "--budget (--time-limit) must be positive, got 0.0"),
    (["--threads", "0"], "--threads must be positive, got 0"),
    (["--half-io"], "--half-io needs --precision bf16 or fp16, not fp32"),
])
def test_the_command_line_refuses_bad_flags_naming_them(tmp_path, capsys, flags, message):
    small_model(tmp_path / "m.onnx")
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()
