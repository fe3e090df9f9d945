"""`optimize` on a partitioned program: reuse, verification, the report, and one program from
every executor."""

import dataclasses
import pickle

import numpy as np
import pytest

import einsat
from einsat.egraph import Limits
from einsat.optimize import Options, run
from einsat.partition import Partitioning
from tests.partition.common import assert_same_function, prenorm, same_program, stacked

# limits that end saturation by its iteration limit, never its time limit: runs are deterministic
LIMITS = Limits(nodes=6000, iterations=3, time_s=120, extract_s=60)
SERIAL = Partitioning(above=0, piece_nodes=64, executor="serial")


@pytest.fixture(scope="module")
def graph():
    return stacked(layers=4, softmax=True)


@pytest.fixture(scope="module")
def serial(graph):
    return einsat.optimize(graph, limits=LIMITS, partition=SERIAL)


def test_each_distinct_piece_is_optimized_once_and_every_copy_verified(graph, serial):
    part = serial.report.partition
    assert len(part.pieces) == 4 and part.templates == 1 and part.cache_hits == 3
    assert [p.template for p in part.pieces] == [0, 0, 0, 0]  # the output of the last is the program's: the same piece
    assert all(p.verified and not p.fallback for p in part.pieces)
    assert_same_function(graph, serial.graph)
    assert serial.report.verification is not None


def test_every_layer_gains_what_the_layer_alone_gains(graph, serial):
    part = serial.report.partition
    first = part.pieces[0]
    assert first.cost_after < first.cost_before
    for p in part.pieces[1:3]:
        assert p.cost_after == pytest.approx(first.cost_after) and p.cost_before == pytest.approx(first.cost_before)
    assert serial.report.cost_after < serial.report.cost_before
    model = einsat.extract.cost_model("h100")
    assert serial.report.cost_after == pytest.approx(model.graph_cost(serial.graph))
    # the Q/K/V merge of each layer: one matmul reads each layer's input
    reads = [sum(1 for n in serial.graph.nodes if n.op is einsat.Op.MATMUL and v in n.inputs)
             for v in ["x"] + [c.values[0] for c in part.cuts]]
    assert reads == [1] * 4


def test_the_report_says_where_it_cut_and_what_crossing_cost(serial):
    part = serial.report.partition
    assert len(part.cuts) == 3
    for c in part.cuts:
        assert c.bytes == 16 * 64 * 4 and c.modeled > 0 and not c.forced
    text = str(serial.report)
    assert "4 pieces (1 optimized, 3 reused)" in text and "reuses piece 0" in text
    data = serial.report.to_dict()
    assert len(data["partition"]["pieces"]) == 4 and len(data["partition"]["cuts"]) == 3
    assert serial.report.to_json()


@pytest.fixture(scope="module")
def alone(graph):
    """Every piece optimized on its own (four jobs: enough to keep two workers busy)."""
    return einsat.optimize(graph, limits=LIMITS, partition=dataclasses.replace(SERIAL, reuse=False))


def test_without_reuse_every_piece_is_optimized_and_the_program_is_the_same(graph, serial, alone):
    assert alone.report.partition.templates == 4 and alone.report.partition.cache_hits == 0
    assert all(p.enodes for p in alone.report.partition.pieces)
    assert alone.report.cost_after == pytest.approx(serial.report.cost_after)
    assert_same_function(serial.graph, alone.graph)


def test_a_process_pool_gives_the_same_program(graph, alone):
    pool = einsat.optimize(graph, limits=LIMITS,
                           partition=dataclasses.replace(SERIAL, executor="process", workers=2, reuse=False))
    assert pool.report.partition.executor == "process" and pool.report.partition.workers == 2
    same_program(alone.graph, pool.graph)


def test_in_a_process_pool_this_process_takes_the_largest_piece_at_once():
    # a spawned worker imports einsat first: the largest piece must not wait for that
    import os

    from einsat.partition.executors import run_jobs
    big, small = stacked(layers=2), stacked(layers=1, hidden=32)
    options = dict(limits=LIMITS, verify=False, cost=einsat.extract.cost_model("h100"))
    results = run_jobs([(small, options), (big, options), (small, options)], "process", workers=2)
    assert [len(r.graph.nodes) > 0 for r in results] == [True] * 3
    assert results[1].pid == os.getpid()
    assert {r.pid for r in results} - {os.getpid()}  # the worker did some of the rest


def test_ray_gives_the_same_program(graph, alone):
    ray = pytest.importorskip("ray", reason="Ray is the 'distributed' extra: pip install 'einsat[distributed]'")
    assert not ray.is_initialized()
    on_ray = einsat.optimize(graph, limits=LIMITS,
                             partition=dataclasses.replace(SERIAL, executor="ray", workers=2, reuse=False))
    assert on_ray.report.partition.executor == "ray"
    assert not ray.is_initialized()  # the local cluster it started is shut down
    same_program(alone.graph, on_ray.graph)


@pytest.mark.parametrize("plant", ["error", "wrong weights"])
def test_a_copy_the_template_does_not_fit_is_optimized_alone(graph, monkeypatch, plant):
    from einsat.partition import driver
    real = driver.rebind

    def planted(optimized, recipe, template, copy, copy_graph, tag, names=None):
        program = real(optimized, recipe, template, copy, copy_graph, tag, names)
        if tag != "p2":
            return program
        if plant == "error":
            raise einsat.EinsatError("planted: this copy does not fit")
        w = max(program.weights, key=lambda k: program.weights[k].size)  # a rebinding that got a weight wrong
        return program.replace(weights={**program.weights, w: program.weights[w] * np.float32(1.01)})

    monkeypatch.setattr(driver, "rebind", planted)
    result = einsat.optimize(graph, limits=LIMITS, partition=SERIAL)
    pieces = result.report.partition.pieces
    assert pieces[2].template == 2 and pieces[2].enodes
    assert ("planted" if plant == "error" else "differs from piece") in pieces[2].fallback
    assert pieces[1].template == 0 and not pieces[1].fallback
    assert_same_function(graph, result.graph)


def test_a_partitioned_programs_recipe_makes_every_new_weight_of_every_copy(graph, serial):
    """`run(..., Options(recipe=True))` of a partitioned program: one recipe over the input's weights
    makes each piece's folded weights (the template's under its own names, each copy's under the
    stitched program's), bit for bit; run on other weights it makes the program for those."""
    result = run(graph, None, Options(limits=LIMITS, partition=SERIAL, recipe=True))
    same_program(serial.graph, result.graph)
    new = sorted(w for w in result.graph.weights if w not in graph.weights)
    assert len(new) >= 4  # a merged Q/K/V weight per layer at least
    recipe = result.recipe
    assert list(recipe.outputs) == new and set(recipe.inputs) <= set(graph.weights)
    made = einsat.run(recipe, {i: graph.weights[i] for i in recipe.inputs})
    for w in new:
        np.testing.assert_array_equal(made[w], result.graph.weights[w], err_msg=w)
    rng = np.random.default_rng(3)
    other = graph.replace(weights={k: (v + rng.standard_normal(v.shape).astype(v.dtype) * np.float32(0.1)
                                       if v.dtype == np.float32 and v.ndim == 2 else v)
                                   for k, v in graph.weights.items()})
    made = einsat.run(recipe, {i: other.weights[i] for i in recipe.inputs})
    rebuilt = result.graph.replace(weights={k: made[k] if k in made else other.weights[k]
                                            for k in result.graph.weights})
    assert_same_function(other, rebuilt)
    with pytest.raises(AssertionError):  # the old weights do not compute the new program
        assert_same_function(other, result.graph)


def test_small_programs_are_not_partitioned_and_large_ones_are(graph):
    small = einsat.optimize(graph, limits=LIMITS)
    assert small.report.partition is None  # 4 layers: under the default 256 nodes
    assert len(graph.nodes) < Partitioning().above
    with pytest.raises(einsat.EinsatError, match="Partitioning"):
        einsat.optimize(graph, partition="yes")


def test_graphs_pickle():
    g = stacked(layers=1)
    again = pickle.loads(pickle.dumps(g))
    same_program(g, again)
    assert again.input_types() == g.input_types() and np.all([a.op is b.op for a, b in zip(g.nodes, again.nodes)])


def test_a_piece_whose_values_nobody_reads_is_dropped():
    b = einsat.GraphBuilder("dead")
    x = b.input("x", (4, 8))
    t = x
    for k in range(3):
        t = b.relu(b.matmul(t, b.weight(f"w{k}", (8, 8))))
    dead = t
    for k in range(3):
        dead = b.relu(b.matmul(dead, b.weight(f"d{k}", (8, 8))))
    graph = b.build(t)
    assert len(graph.nodes) == 12  # the builder keeps the dead chain
    result = einsat.optimize(graph, limits=LIMITS, partition=dataclasses.replace(SERIAL, piece_nodes=6, min_unit=2))
    assert any("dropped" in p.fallback for p in result.report.partition.pieces)
    assert len(result.graph.nodes) <= 6
    assert_same_function(graph, result.graph)


def test_the_html_report_lists_pieces_and_cuts(serial):
    from einsat.viz.report import report_html
    page = report_html(serial.report, before=serial.input, after=serial.graph)
    assert "<h3>Partition</h3>" in page and "4 pieces (1 optimized, 3 reused)" in page
    assert page.count("piece 0&#x27;s") == 3  # the three copies name their template
    for c in serial.report.partition.cuts:
        assert c.values[0] in page


def test_an_interrupted_piece_stops_the_run_and_the_rest_stay_as_they_were(graph, monkeypatch):
    """Ctrl-C during a piece's search (its report says interrupted): no further piece starts;
    the pieces not optimized keep their input program, and the result is verified all the same."""
    from einsat.partition import executors
    real = executors.optimize_piece

    def interrupted(job):
        r = real(job)
        r.report = dataclasses.replace(r.report, interrupted=True)
        return r

    monkeypatch.setattr(executors, "optimize_piece", interrupted)
    result = einsat.optimize(graph, limits=LIMITS, partition=dataclasses.replace(SERIAL, reuse=False))
    pieces = result.report.partition.pieces
    assert result.report.interrupted and "interrupted" in str(result.report)
    assert pieces[0].enodes and not pieces[0].fallback
    assert all("interrupted" in p.fallback and p.cost_after == p.cost_before for p in pieces[1:])
    assert result.report.verification is not None
    assert_same_function(graph, result.graph)


@pytest.mark.parametrize("guarded", [True, False])
def test_an_unguarded_main_script_is_not_imported_again_by_workers(tmp_path, monkeypatch, guarded):
    import sys
    import types

    from einsat.partition.executors import spawn_safe
    script = tmp_path / "script.py"
    work = "import einsat\nresult = einsat.optimize('model.onnx')\n"
    script.write_text(f"if __name__ == '__main__':\n    {work.splitlines()[1]}\n" if guarded else work)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    safe, why = spawn_safe()
    assert safe is guarded and (guarded or "has no `if __name__" in why)


def test_without_a_safe_main_module_the_pieces_run_in_this_process(graph, monkeypatch):
    from einsat.partition import driver
    said = []  # the warning (the CLI's tests may have taken the einsat loggers' output elsewhere)
    monkeypatch.setattr(driver.log, "warning", lambda message, *args: said.append(message % args))
    monkeypatch.setattr(driver, "spawn_safe", lambda: (False, "planted: no guard"))
    result = einsat.optimize(graph, limits=LIMITS, partition=dataclasses.replace(SERIAL, executor="process"))
    assert result.report.partition.executor == "serial"
    assert any("planted: no guard" in s for s in said)


def test_a_time_budget_is_shared_by_the_pieces(graph, monkeypatch):
    from einsat.partition import executors
    seen = []
    real = executors.optimize_piece
    monkeypatch.setattr(executors, "optimize_piece", lambda job: seen.append(job[1].budget) or real(job))
    result = einsat.optimize(graph, limits=LIMITS, budget=30.0, partition=dataclasses.replace(SERIAL, reuse=False))
    assert len(seen) == 4 and all(b is not None and 0.5 <= b <= 0.8 * 30.0 / 4 + 1e-9 for b in seen)
    assert result.report.verification is not None


@pytest.mark.slow
def test_a_layer_inside_a_partitioned_model_costs_no_more_than_the_layer_optimized_alone():
    # issue #17: "modeled gains at least those of a single layer optimized alone", per layer
    from einsat.partition import partition
    graph = prenorm(layers=3)
    settings = Partitioning(above=0, executor="serial")
    # the ILP's time limit far off, as elsewhere here: at the default 5 s a loaded machine stopped
    # the layer's ILP at its time limit in one run and not in the other (40.67 against 39.42 µs)
    whole = einsat.optimize(graph, limits=LIMITS, partition=settings)
    pieces, _ = partition(graph, settings)
    alone = einsat.optimize(pieces[0].graph, limits=LIMITS, partition=False)
    part = whole.report.partition
    layers = [p for p in part.pieces if p.fingerprint == part.pieces[0].fingerprint]
    assert len(layers) == 3  # the last layer too: it is cut off the final norm and reuses the first
    assert alone.report.cost_after < alone.report.cost_before
    for p in layers:
        assert p.cost_before == pytest.approx(alone.report.cost_before)
        assert p.cost_after <= alone.report.cost_after * (1 + 1e-9)
    # the whole program's cost is its pieces' (stitching adds nothing); the final norm, which no rule
    # improves, is what keeps the whole-model ratio below the layer's
    assert whole.report.cost_after == pytest.approx(sum(p.cost_after for p in part.pieces))
    norm = part.pieces[-1]
    assert norm.stop_reason == "saturated" and norm.cost_after == pytest.approx(norm.cost_before)
    assert whole.report.speedup < alone.report.speedup
    # op for op, the stitched model is three copies of the layer optimized alone and the final norm
    layer = alone.graph.op_counts()
    assert whole.graph.op_counts() == {op: 3 * n + (op == "layernorm") for op, n in layer.items()}


def test_a_cut_is_costed_on_the_bandwidth_of_the_models_device_or_its_fallbacks():
    from einsat.cost.models import cost_model
    from einsat.cost.profiled import MeasuredCost
    from einsat.partition.driver import crossing_cost

    roofline = cost_model("h100-roofline")
    assert crossing_cost(roofline, 10**6) == 2 * 10**6 / roofline.device.bandwidth * 1e6
    measured = MeasuredCost("h100")  # the committed profile: the bandwidth fitted to its kernels
    assert crossing_cost(measured, 10**6) == 2 * 10**6 / measured.fallback.families["kernel"].bytes_per_us

    class OnTheDevice:  # the CuPy model's device is the GPU itself: no datasheet bandwidth
        device, fallback = object(), measured.fallback
    assert crossing_cost(OnTheDevice(), 10**6) == crossing_cost(measured, 10**6)
    assert crossing_cost(object(), 10**6) is None


def test_the_pieces_get_the_measured_models_options(monkeypatch):
    """`profile_budget`, `check_reps` and `recheck` reach every piece's `optimize` (they were
    dropped: a partitioned run profiled each piece for the default 120 s); a piece's check keeps
    a result not measured slower (the stitched whole's check judges)."""
    from einsat.partition import driver
    seen = []
    real = driver.run_jobs

    def spy(jobs, *args, **kwargs):
        seen.extend(options for _, options, *_ in jobs)  # (a job may carry when the pieces' share ends)
        return real(jobs, *args, **kwargs)

    monkeypatch.setattr(driver, "run_jobs", spy)
    einsat.optimize(stacked(layers=2), limits=LIMITS, partition=SERIAL,
                    measure=einsat.Measure(profile_s=7.0, check_reps=5, recheck=True))
    assert seen and all(o.measure == einsat.Measure(profile_s=7.0, check_reps=5, recheck=True, keep="not slower")
                        for o in seen)
