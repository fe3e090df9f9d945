"""`einsat.pipeline.Options`: one record of a run's settings, made alike by the Python API and
the command line, one keyword per meaning (a keyword that is gone names what to use instead),
bad values refused with clear errors."""

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
    api = Options.of(cost="h200", budget=12, limits=Limits(nodes=500, memory_gb=2, extractor="greedy"),
                     measure=einsat.Measure(profile_s=7, recheck=True), verify=True,
                     precision=einsat.Precision("bf16", half_io=True),
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


def test_optimize_takes_at_most_eleven_keywords_each_one_meaning():
    """#41: `einsat.optimize` took 22 keywords, five of them clocks; now the program, its
    example inputs and at most eleven keywords (`opset`, #37, counted), and one clock for the
    whole run (`budget`) beside the search's work (`Limits`)."""
    import inspect

    from einsat.pipeline.options import KEYWORDS
    optimize_module = sys.modules["einsat.optimize"]
    params = inspect.signature(optimize_module.optimize).parameters
    keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert len(keywords) + ("opset" not in keywords) <= 11, keywords
    assert set(keywords) == set(KEYWORDS)  # the Options record's keywords are optimize's
    assert not {"time_limit", "extract_seconds", "profile_budget"} & set(keywords)


@pytest.mark.parametrize("gone,instead", [
    ({"time_limit": 3}, r"time_limit= is gone; use budget= \(the whole run's seconds\) or "
                        r"limits=Limits\(extract_s=...\)"),
    ({"extract_seconds": 3}, r"extract_seconds= is gone; use limits=Limits\(extract_s=...\)"),
    ({"extractor": "greedy"}, r"extractor= is gone; use limits=Limits\(extractor=...\)"),
    ({"profile_budget": 7}, r"use measure=Measure\(profile_s=...\)"),
    ({"check_reps": 3}, r"use measure=Measure\(check_reps=...\)"),
    ({"recheck": True}, r"use measure=Measure\(recheck=True\)"),
    ({"threads": 2}, r"use measure=Measure\(threads=...\)"),
    ({"input_shapes": {"x": (1, 2)}}, r"use load=Load\(input_shapes=...\)"),
    ({"fill_weights": "random"}, r"use load=Load\(fill_weights=...\)"),
    ({"seed": 3}, r"use load=Load\(seed=...\)"),
    ({"half_io": True}, r"use precision=Precision\('bf16' or 'fp16', half_io=True\)"),
    ({"recipe": True}, r"recipe= is gone; use einsat.optimize.run\(program, example_inputs, Options\(recipe=True"),
    ({"budgets": 5}, r"unknown keyword\(s\) \['budgets'\]; the keywords are \["),
])
def test_a_keyword_that_is_gone_says_what_to_use_instead(monkeypatch, gone, instead):
    optimize_module = sys.modules["einsat.optimize"]
    monkeypatch.setattr(optimize_module, "pipeline_run", lambda *a, **k: pytest.fail("ran with a gone keyword"))
    with pytest.raises(EinsatError, match=instead):
        einsat.optimize("m.onnx", **gone)
    with pytest.raises(EinsatError, match=instead):
        Options.of(**gone)


def test_the_ilp_seconds_are_the_search_limits(tmp_path, monkeypatch, capsys):
    """One ILP solve's seconds are `Limits.extract_s` (what `time_limit=` was in Python); the
    whole run's are `budget` (what `--time-limit` was on the command line, now gone)."""
    assert Options.of(limits=Limits(extract_s=3)).budget_s is None
    from einsat.pipeline.plan import EXTRACT_S, Planner
    assert Limits().extract_s == EXTRACT_S  # the planner's documented default
    assert Planner.of(Options(limits=Limits(extract_s=3))).seconds("extract") == 3
    small_model(tmp_path / "m.onnx")
    argv = ["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q", "--time-limit", "9"]
    assert main(argv) == 2 and not (tmp_path / "o.onnx").exists()
    err = capsys.readouterr().err
    assert err.strip() == "einsat: error: --time-limit is gone; use --budget S (seconds for the whole run)"
    new, _ = command_options(tmp_path, monkeypatch, "--budget", "9")
    assert new.budget_s == 9.0 and new.saturation_limits().extract_s == EXTRACT_S


def test_options_round_trip_through_optimizes_keywords_and_are_frozen():
    o = Options.of(cost="cpu", budget=5, verify="prove", measure=einsat.Measure(threads=2, check_reps=3),
                   partition=False, load=einsat.Load(seed=4), precision=einsat.Precision("fp16", half_io=True))
    assert Options.of(**o.keywords()) == o and o.half_io and o.precision == "fp16"
    assert o.replace(load=einsat.Load(seed=5)) != o and o.replace(load=einsat.Load(seed=5)).loading.seed == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.load = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.measuring.threads = 1
    shared = Budget(5)  # a shared Budget compares by its seconds; its object is kept
    assert Options(budget=shared) == Options(budget=5.0) != Options(budget=6.0)
    assert Options(budget=shared).run_budget() is shared and Options(budget=5).run_budget() is not shared


@pytest.mark.parametrize("keywords,message", [
    ({"limits": Limits(extractor="best")}, r"unknown extractor 'best' \(Limits\(extractor=\)\)"),
    ({"limits": Limits(extract_s=-2)}, r"Limits\(extract_s=\) takes non-negative seconds"),
    ({"verify": "yes"}, "verify= takes True, False or 'prove'"),
    ({"budget": 0}, r"budget= \(--budget\) takes positive seconds, not 0"),
    ({"budget": -1.0}, "budget= .* takes positive seconds"),
    ({"budget": "10"}, "budget= .* takes positive seconds, not '10'"),
    ({"partition": True}, "partition= takes a Partitioning, None or False, not bool"),
    ({"precision": "fp8"}, "unknown precision 'fp8'"),
    ({"precision": einsat.Precision("fp32", half_io=True)}, r"half_io .* needs precision 'bf16' or 'fp16', not 'fp32'"),
    ({"limits": {"nodes": 5}}, "limits= takes an einsat.egraph.Limits, not dict"),
    ({"load": {"seed": 5}}, r"load= takes an einsat.Load\(...\), not dict"),
    ({"measure": 5}, r"measure= takes an einsat.Measure\(...\), not int"),
    ({"progress": "loud"}, "progress= takes a callable"),
])
def test_bad_values_are_refused_naming_the_option(keywords, message):
    with pytest.raises(EinsatError, match=message):
        Options.of(**keywords)


@pytest.mark.parametrize("make,message", [
    (lambda: einsat.Measure(profile_s=-1), r"Measure\(profile_s=\) \(--profile-budget\) takes non-negative"),
    (lambda: einsat.Measure(check_reps=0), r"Measure\(check_reps=\) takes a positive number of rounds"),
    (lambda: einsat.Measure(threads=0), r"Measure\(threads=\) \(--threads\) takes a positive number"),
    (lambda: einsat.Measure(keep="faster or equal"), r"Measure\(keep=\) takes one of 'faster', 'not slower'"),
    (lambda: einsat.Load(seed="3"), r"Load\(seed=\) takes an integer, not '3'"),
])
def test_the_groups_refuse_bad_values_naming_the_field(make, message):
    with pytest.raises(EinsatError, match=message):
        make()


def test_optimize_refuses_a_bad_value_before_any_work(monkeypatch):
    optimize_module = sys.modules["einsat.optimize"]
    monkeypatch.setattr(optimize_module, "pipeline_run", lambda *a, **k: pytest.fail("ran with a bad option"))
    with pytest.raises(EinsatError, match="unknown extractor"):
        einsat.optimize("no such file.onnx", limits=Limits(extractor="exact"))


@pytest.mark.parametrize("flags,message", [
    (["--budget", "0"], "--budget must be positive, got 0.0"),
    (["--threads", "0"], "--threads must be positive, got 0"),
    (["--half-io"], "--half-io needs --precision bf16 or fp16, not fp32"),
])
def test_the_command_line_refuses_bad_flags_naming_them(tmp_path, capsys, flags, message):
    small_model(tmp_path / "m.onnx")
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()
