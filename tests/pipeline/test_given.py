"""The file as given (`einsat.pipeline.given`): under cost "cpu", einsat's writing of the result is
timed against the ONNX file the user gave, and where the given file is measured faster beyond noise
it is written unchanged. The verdicts are stood in for where the choice is tested (a `Comparison`
per size), so the tests hold on any load; one test times two real files to check the comparison
runs both on the same inputs at each size."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.cli import main
from einsat.pipeline import Options, given
from einsat.pipeline.options import Load
from einsat.runtime.profiler import Comparison


def write_model(path, batch="batch", opset=17) -> bytes:
    """y = relu(x + 0) @ w: einsat's reading drops the zero add, so its writing differs from this file."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.zeros(8, np.float32), "zero"),
             numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")]
    nodes = [helper.make_node("Add", ["x", "zero"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "given", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    data = model.SerializeToString()
    path.write_bytes(data)
    return data


def verdict(candidate_faster: bool, reps: int = 15) -> Comparison:
    return Comparison(1.0, 0.8 if candidate_faster else 1.2, (1, 1), (1, 1), reps, reps if candidate_faster else 0,
                      0.001 if candidate_faster else 0.9, (0, 0), candidate_faster)


def cpu_options(**load) -> Options:
    return Options(cost="cpu", load=Load(**load) if load else None)


SIZES = {"batch": [2, 16]}


def optimized(tmp_path, returned_input: bool):
    """An ONNX file and the result of optimizing it for two sizes (the default cost: not compared), as
    if the run had returned its input or not."""
    src = tmp_path / "m.onnx"
    data = write_model(src)
    result = einsat.optimize(str(src), load=Load(sizes=SIZES))
    assert result.report.given is None and result.given is None
    result.report.kept_input = "stood in" if returned_input else None
    return src, data, result


@pytest.mark.parametrize("given_faster_at", [None, 2, 16])
def test_an_optimized_result_gives_way_only_to_a_given_file_measured_faster(tmp_path, monkeypatch, given_faster_at):
    src, data, result = optimized(tmp_path, returned_input=False)
    seen = []

    def compare(graph, sizes, baseline, candidate, written, reps, threads):
        seen.append(sizes["batch"])
        assert baseline is written and written != data and candidate == data  # is the given file faster?
        return verdict(sizes["batch"] == given_faster_at)

    monkeypatch.setattr(given, "compare_files", compare)
    given.keep_given(result, str(src), cpu_options(sizes=SIZES))
    result.save(tmp_path / "out.onnx")
    written = (tmp_path / "out.onnx").read_bytes()
    g = result.report.given
    assert g["compared"] and g["kept"] is (given_faster_at is not None)
    if given_faster_at is None:
        assert seen == [2, 16]  # every named size, not the probe's extra ones
        assert result.given is None and written != data
        assert onnx.load_from_string(written).graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        assert "einsat's result measured against the given file: 1.200x at batch 2; 1.200x at batch 16" in \
            str(result.report)
    else:
        assert seen == [2, 16][:[2, 16].index(given_faster_at) + 1]  # the first size the given file wins decides
        assert result.given == data and written == data
        assert "the GIVEN FILE is written unchanged: measured faster than einsat's result" in str(result.report)


@pytest.mark.parametrize("einsat_faster_at", [(), (2,), (2, 16)])
def test_a_returned_input_replaces_the_given_file_only_where_measured_faster_at_every_size(
        tmp_path, monkeypatch, einsat_faster_at):
    src, data, result = optimized(tmp_path, returned_input=True)

    def compare(graph, sizes, baseline, candidate, written, reps, threads):
        assert candidate is written and baseline == data  # is einsat's writing of the input faster?
        return verdict(sizes["batch"] in einsat_faster_at)

    monkeypatch.setattr(given, "compare_files", compare)
    given.keep_given(result, str(src), cpu_options(sizes=SIZES))
    result.save(tmp_path / "out.onnx")
    written = (tmp_path / "out.onnx").read_bytes()
    if einsat_faster_at == (2, 16):
        assert result.given is None and written != data
        assert "einsat's writing of the input, measured faster than the given file beyond noise at every size: " \
               "1.250x at batch 2; 1.250x at batch 16" in str(result.report)
    else:
        assert result.given == data and written == data
        assert "the GIVEN FILE is written unchanged: einsat returned its input" in str(result.report)


@pytest.mark.parametrize("slower_at_2_threads", [None, 16])
def test_a_returned_input_replaces_the_given_file_only_if_not_slower_at_the_other_thread_counts(
        tmp_path, monkeypatch, slower_at_2_threads):
    """Measure(not_slower_at=(2,)) at 1 deployment thread: einsat's writing, faster at every size at
    1 thread, is timed at 2 threads too, and at a size where it is slower there the given file stays."""
    src, data, result = optimized(tmp_path, returned_input=True)
    seen = []

    def compare(graph, sizes, baseline, candidate, written, reps, threads):
        seen.append((sizes["batch"], threads))
        return verdict(threads == 1 or sizes["batch"] != slower_at_2_threads)

    monkeypatch.setattr(given, "compare_files", compare)
    options = Options(cost="cpu", load=Load(sizes=SIZES), measure=einsat.Measure(not_slower_at=(2,)))
    given.keep_given(result, str(src), options)
    g = result.report.given
    if slower_at_2_threads is None:
        assert seen == [(2, 1), (2, 2), (16, 1), (16, 2)] and result.given is None and not g["kept"]
        assert [o["slower"] for row in g["per_size"] for o in row["comparison"]["other_threads"]] == [False, False]
        assert "1.250x at batch 2; at 2 intra-op threads: 1.250x, not slower (15/15 rounds); 1.250x at batch 16" \
            in str(result.report)
    else:
        assert seen == [(2, 1), (2, 2), (16, 1), (16, 2)] and result.given == data and g["kept"]
        assert g["per_size"][-1]["comparison"]["other_threads"][0]["slower"]
        assert "at 2 intra-op threads: 0.833x, SLOWER (0/15 rounds)" in str(result.report)
        assert "its writing of it was measured slower beyond noise at another thread count" in str(result.report)


def test_the_given_file_stands_for_the_result_only_where_it_is_the_same_program(tmp_path):
    model = onnx.load_from_string(write_model(tmp_path / "m.onnx"))
    assert given.why_not(model, cpu_options()) is None
    assert "fill_weights" in given.why_not(model, cpu_options(fill_weights="random"))
    assert "bf16" in given.why_not(model, Options(cost="cpu", precision="bf16"))
    assert "opset 17 is above opset=13" in given.why_not(model, Options(cost="cpu", opset=13))
    model.graph.initializer[1].data_location = TensorProto.EXTERNAL
    assert "external" in given.why_not(model, cpu_options())


@pytest.mark.parametrize("returned_input", [False, True])
def test_a_budget_too_small_for_the_rounds_writes_the_file_that_needs_no_proof(tmp_path, monkeypatch, returned_input):
    """Rounds that would not fit in the budget's seconds left are not run: a returned input's file is
    then the given one (it cannot be slower than itself), an optimized result stands (it was measured
    faster than einsat's writing of the input)."""
    src = tmp_path / "m.onnx"
    data = write_model(src, batch=4)
    result = einsat.optimize(str(src))
    result.report.measured = {"baseline_ms": 100.0}  # the run's own check: 100 ms a run
    result.report.kept_input = "stood in" if returned_input else None
    monkeypatch.setattr(given, "compare_files", lambda *a: pytest.fail("compared past the budget"))
    given.keep_given(result, str(src), cpu_options(), left_s=5.0)
    g = result.report.given
    assert not g["compared"] and "the budget left too little to time the files (about 7.2 s)" in g["why"]
    (line,) = given.given_lines(result.report)
    if returned_input:
        assert result.given == data and "the GIVEN FILE is written unchanged, not timed" in line
    else:
        assert result.given is None and "einsat's result stands" in line


def test_two_files_are_timed_on_the_same_inputs_at_each_size(tmp_path):
    src = tmp_path / "m.onnx"
    data = write_model(src)
    result = einsat.optimize(str(src), load=Load(sizes={"batch": [3]}))
    for sizes in ({"batch": 3}, {"batch": 5}):
        written = result.onnx_bytes()
        c = given.compare_files(result.input, sizes, written, data, written, reps=3, threads=1)
        assert c.rounds >= 3 and c.baseline_ms > 0 and c.candidate_ms > 0 and c.backend == "onnxruntime"


def test_the_command_line_writes_the_given_file_when_it_was_kept(tmp_path, monkeypatch):
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    data = write_model(src, batch=4)
    calls = []

    def keep(result, source, options, left_s=None):
        calls.append((str(source), options.loading.fill_weights))
        result.given = src.read_bytes()
        return result

    monkeypatch.setattr(given, "keep_given", keep)
    assert main(["optimize", str(src), "-o", str(out), "--quiet"]) == 0
    assert calls == [(str(src), None)] and out.read_bytes() == data


@pytest.mark.parametrize("as_file", [True, False])
def test_a_budget_holds_the_files_comparison_until_the_run_ends(tmp_path, as_file):
    """Under a budget the files' comparison runs after the pipeline, so the pipeline holds its
    seconds back from every phase (`phases.GIVEN`, given back when it ends): on
    resnet18 the check and the alternative's had taken the last seconds, and the given file was
    written unchanged, untimed, where einsat's writing of the input ran faster. A Graph has no
    given file: nothing is held for one."""
    from einsat.budget import Budget
    from einsat.ir.onnx.io import load_onnx
    from einsat.pipeline import phases, plan
    from einsat.pipeline.plan import Planner

    src = tmp_path / "m.onnx"
    write_model(src, batch=2)
    options = Options(cost="cpu", budget=60.0)
    state = phases.State(options, options.model(), Planner.of(options, Budget(60.0)))
    phases.load(state, str(src) if as_file else load_onnx(str(src)), None)
    phases.reference(state)
    held = state.planner.held.get(phases.GIVEN, 0.0)
    check = state.planner.held["check"]
    assert check > 0
    # two files' rounds, as the check's two programs', in two blocks of the check's three
    assert held == (pytest.approx(check * plan.GIVEN_BLOCKS / plan.CHECK_BLOCKS) if as_file else 0.0)
