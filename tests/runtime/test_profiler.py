"""The shared profiler: statistics, interleaving, budgets and failures (with fake runners: no
timing luck), the verdict on side-by-side timings, and real onnxruntime timings as ratios."""

from __future__ import annotations

import itertools
import time

import pytest

from einsat.cost.profile_db import ProfileDB
from einsat.ir.onnx.export import to_onnx
from einsat.ir.registry import Op
from einsat.ir.signature import signature_of
from einsat.ir.types import TensorType
from einsat.runtime.profiler import (
    Comparison,
    interleaved,
    judge,
    profile_into,
    profile_signatures,
    sign_test,
    signature_graph,
    signed_rank_test,
    summarize,
)


def matmul_sig(n):
    return signature_of(Op.MATMUL, {}, [TensorType((n, n)), TensorType((n, n))])


def fixed(us):
    return lambda: us


def test_summary_reports_outliers_without_moving_the_median():
    times = [10.0] * 9 + [10.5] * 5 + [400.0]
    s = summarize(times)
    assert s["median_us"] == 10.0 and s["outliers"] == 1 and s["reps"] == 15 and s["max_us"] == 400.0
    assert summarize([10.0] * 15)["outliers"] == 0


def test_runners_are_warmed_up_then_interleaved_round_by_round():
    calls = []
    runners = {k: (lambda k=k: calls.append(k) or 1.0) for k in "abc"}
    times = interleaved(runners, reps=3, warmup=2)
    assert calls == list("aabbcc") + list("abc") + list("cba") + list("abc")  # every other round reversed
    assert times == {k: [1.0] * 3 for k in "abc"}


def test_the_call_overhead_subtracted_is_the_one_timed_beside_the_batch():
    """The machine's load rises after the fixed measurements (the call overhead goes 10 -> 60 µs,
    every run 50 µs slower): an entry subtracts the overhead of its own rounds, so the 5 and 40 µs
    of work stay 5 and 40 (subtracting the first 10 gave 45 and 80: a 64x-FLOPs op under 2x the
    small one, tests/runtime's loaded make test failure)."""
    sigs = [matmul_sig(4), matmul_sig(8)]
    loaded = {"now": False}
    work = {sigs[0].key: 5.0, sigs[1].key: 40.0}

    def overhead():
        return 60.0 if loaded["now"] else 10.0

    def make(sig):
        loaded["now"] = True  # the batch starts: from here on, every run pays the higher load
        return lambda: 60.0 + work[sig.key]

    run = profile_signatures(sigs, reps=5, make_runner=make, overhead=overhead)
    assert run.call_overhead_us == 10.0  # the fixed phase's, reported as it was
    assert run.entries[sigs[0].key]["us"] == 5.0 and run.entries[sigs[1].key]["us"] == 40.0


def test_entries_subtract_the_call_overhead_and_keep_the_raw_median():
    sigs = [matmul_sig(4), matmul_sig(8)]
    us = {sigs[0].key: 30.0, sigs[1].key: 110.0}
    run = profile_signatures(sigs, reps=5, make_runner=lambda s: fixed(us[s.key]), overhead=fixed(10.0))
    assert run.call_overhead_us == 10.0 and not run.failures and not run.left
    assert run.entries[sigs[0].key]["us"] == 20.0 and run.entries[sigs[1].key]["us"] == 100.0
    assert run.entries[sigs[1].key]["raw_us"] == 110.0 and run.entries[sigs[1].key]["flops"] == 2 * 8 ** 3
    assert run.method["order"] == "interleaved" and run.method["reps"] == 5


def test_every_entry_keeps_the_reference_time_of_its_batch():
    """The reference program runs in each batch's rounds: an entry's load is known by it."""
    sigs = [matmul_sig(n) for n in range(2, 2 + 20)]  # two batches
    refs = iter([200.0] * 100 + [600.0] * 100)
    run = profile_signatures(sigs, reps=3, warmup=0, make_runner=lambda s: fixed(50.0), overhead=fixed(10.0),
                             reference=lambda: next(refs))
    assert [run.entries[s.key]["ref_us"] for s in sigs[:16]] == [200.0] * 16
    assert len(run.reference_us) == 2 and run.reference_us[0] == 200.0


def test_a_signature_that_cannot_run_is_recorded_and_the_others_go_on():
    good, bad = matmul_sig(4), matmul_sig(8)

    def make(sig):
        if sig is bad:
            raise RuntimeError("no kernel for this")
        return fixed(5.0)

    run = profile_signatures([bad, good], reps=3, make_runner=make, overhead=fixed(1.0))
    assert set(run.entries) == {good.key} and "no kernel for this" in run.failures[bad.key]


def test_the_budget_leaves_signatures_to_the_fallback_and_says_so():
    sigs = [matmul_sig(n) for n in range(2, 40)]
    said = []
    run = profile_signatures(sigs, reps=2, budget_s=0.0, make_runner=lambda s: fixed(5.0),
                             overhead=fixed(1.0), progress=said.append)
    assert not run.entries and len(run.left) == len(sigs)
    assert any("budget" in line and str(len(sigs)) in line for line in said)


def test_the_timing_loop_writes_each_batch_into_the_database_as_it_goes():
    """`profile_into`, the loop both targets' profilers share: batches in order, each entry in the
    profile database (with its signature) before the next batch is measured, a signature measured
    again leaves the failures, a batch that raises is recorded signature by signature."""
    sigs = [matmul_sig(n) for n in range(2, 9)]  # 7 signatures: batches of 3, 3, 1
    db = ProfileDB()
    db.failures[sigs[0].key] = "failed in an earlier run"
    seen, said = [], []

    def measure(batch):
        seen.append(([s.key for s in batch], len(db)))  # what the database held when it began
        if sigs[3] in batch:
            raise RuntimeError("the device went away")
        entries = {s.key: {"us": float(s.flops())} for s in batch if s is not sigs[1]}
        return entries, ({sigs[1].key: "no kernel"} if sigs[1] in batch else {})

    run = profile_into(db, sigs, measure, batch=3, progress=said.append)
    assert [len(keys) for keys, _ in seen] == [3, 3, 1] and [held for _, held in seen] == [0, 2, 2]
    assert set(db.entries) == set(run.entries) == {sigs[k].key for k in (0, 2, 6)}
    assert db.entries[sigs[2].key]["us"] == sigs[2].flops() and db.signature(sigs[2].key) == sigs[2]
    assert sigs[0].key not in db.failures and db.failures[sigs[1].key] == "no kernel"
    assert {sigs[k].key for k in (3, 4, 5)} <= set(db.failures) and "device went away" in db.failures[sigs[4].key]
    assert run.failures == db.failures and not run.left
    assert [line.split(" signatures")[0] for line in said] == ["profiled 3/7", "profiled 6/7", "profiled 7/7"]


def test_the_timing_loop_counts_its_budget_from_the_given_start():
    sigs = [matmul_sig(n) for n in range(2, 6)]
    db, said = ProfileDB(), []
    started = time.monotonic() - 10.0  # the caller spent 10 s before the loop (its fixed runners)
    run = profile_into(db, sigs, lambda b: ({s.key: {"us": 1.0} for s in b}, {}), budget_s=5.0,
                       progress=said.append, left_to="left to the fallback", start=started)
    assert not db.entries and run.left == sigs and run.seconds >= 10.0
    assert said == ["profiling budget of 5 s reached: 4 signatures left to the fallback"]


def test_profiled_signatures_go_into_the_given_database():
    sigs = [matmul_sig(4), matmul_sig(8)]
    db = ProfileDB(device={"kind": "test"})
    run = profile_signatures(sigs, reps=3, make_runner=lambda s: fixed(30.0), overhead=fixed(10.0), db=db)
    assert set(db.entries) == {s.key for s in sigs}
    assert all(db.entries[k]["us"] == run.entries[k]["us"] == 20.0 for k in db.entries)


def test_the_verdict_needs_a_clear_majority_and_a_margin():
    base = [100.0 + k % 3 for k in range(15)]
    assert judge(base, [v * 0.8 for v in base]).faster                 # 1.25x, every round
    assert not judge(base, list(base)).faster                           # the same program
    assert not judge(base, [v * 1.2 for v in base]).faster              # slower
    assert not judge(base, [v * 0.995 for v in base]).faster            # within the margin
    mixed = [v * (0.7 if k % 2 else 1.3) for k, v in enumerate(base)]   # wins 7 of 15 rounds
    c = judge(base, mixed)
    assert not c.faster and c.wins == 7 and c.rounds == 15
    # won by a lot in 11 rounds, lost by a little in 4: faster (a sign test alone would miss it)
    clear = [v * (0.7 if k % 4 else 1.05) for k, v in enumerate(base)]
    c = judge(base, clear)
    assert c.wins == 11 and sign_test(11, 15) > Comparison.ALPHA and c.faster
    assert c.baseline_spread_ms[0] <= c.baseline_ms <= c.baseline_spread_ms[1]


def test_slower_needs_the_rounds_lost_and_a_margin():
    base = [100.0 + k % 3 for k in range(15)]
    assert judge(base, [v * 1.2 for v in base]).slower                  # lost every round by 20%
    assert not judge(base, list(base)).slower                           # the same program
    assert not judge(base, [v * 1.01 for v in base]).slower             # lost every round, within the margin
    assert not judge(base, [v * 0.8 for v in base]).slower              # faster
    # lost 11 of 15 rounds by 30%: p = 0.059 by the sign test, short of a verdict either way
    lost = [v * (1.3 if k % 4 else 0.99) for k, v in enumerate(base)]
    c = judge(base, lost)
    assert c.rounds - c.wins == 11 and not c.slower and not c.faster
    lost = [v * (1.3 if k % 5 else 0.99) for k, v in enumerate(base)]  # 12 of 15: p = 0.018
    assert judge(base, lost).slower


def test_signed_rank_test_matches_its_exact_tail():
    assert signed_rank_test([1.0] * 10) == pytest.approx(2 ** -10)      # every rank positive
    assert signed_rank_test([-1.0] * 10) == 1.0
    assert signed_rank_test([0.0, 0.0]) == 1.0
    # n = 3, ranks 1, 2, 3; W+ = 3; the 8 sign patterns give W+ = 0, 1, 2, 3, 3, 4, 5, 6: 5 reach 3
    assert signed_rank_test([-0.1, -0.2, 0.3]) == pytest.approx(5 / 8)
    # ties share their rank: |d| = 1, 1, 2 -> ranks 1.5, 1.5, 3; W+ = 1.5 + 3 = 4.5, reached by
    # 3 of the 8 patterns (4.5 twice, 6 once)
    assert signed_rank_test([1.0, -1.0, 2.0]) == pytest.approx(3 / 8)
    assert signed_rank_test([1.0, -1.0, 2.0]) < signed_rank_test([1.0, -2.0, 1.0])


def test_sign_test_is_the_binomial_tail():
    assert sign_test(15, 15) == pytest.approx(2 ** -15)
    assert sign_test(0, 15) == 1.0
    assert sign_test(12, 15) == pytest.approx(sum(__import__("math").comb(15, k) for k in range(12, 16)) / 2 ** 15)
    assert sign_test(12, 15) < Comparison.ALPHA < sign_test(11, 15)


def test_conv_weights_are_initializers_in_the_one_node_model():
    sig = signature_of(Op.CONV, {}, [TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3)), TensorType((4,))])
    g = signature_graph(sig)
    assert g.inputs == ("in0",) and set(g.weights) == {"in1", "in2"}
    attn = signature_of(Op.MATMUL, {}, [TensorType((2, 8, 16)), TensorType((2, 16, 8))])
    assert not signature_graph(attn).weights  # a batched product of activations has no weight


def test_onnxruntime_times_grow_with_the_work():
    """Ratios only: 64× the FLOPs of a small matmul cost far more than twice its time."""
    pytest.importorskip("onnxruntime")
    small, big = matmul_sig(32), matmul_sig(128)
    run = profile_signatures([small, big], reps=7)
    assert not run.failures and run.call_overhead_us > 0
    e_small, e_big = run.entries[small.key], run.entries[big.key]
    assert e_big["us"] > 2 * e_small["us"] > 0
    assert e_big["p10_us"] <= e_big["raw_us"] <= e_big["p90_us"]
    assert e_small["ref_us"] > 0 and run.method["node_overhead_us"] >= 0 and run.method["cache_bytes"] > 0
    # streaming 64 MiB takes longer than a 128^2 matmul (64 KiB per operand, 4 MFLOP) whatever the load
    assert run.method["stream_bytes_per_us"] * e_big["us"] < 4096 * 4096 * 4


def test_a_verdict_of_faster_needs_a_second_block_to_agree():
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.profiler import compare_programs
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2,))))
    clock = {"n": 0}

    def scripted(graph, seed):  # the candidate wins the first block clearly, then loses
        def run():
            clock["n"] += 1
            first_block = clock["n"] <= 2 * (2 + 5)  # warm-up and 5 rounds of both
            return 100.0 if seed == "b" or not first_block else 80.0
        return run

    runners = itertools.cycle(["b", "c"])
    c = compare_programs(g, g, reps=5, warmup=2, runner=lambda graph, seed: scripted(graph, next(runners)))
    assert c.rounds == 10 and not c.faster
    runners = iter(["b", "c"])
    clock["n"] = 0
    c = compare_programs(g, g, reps=5, warmup=2, confirm=False,
                         runner=lambda graph, seed: scripted(graph, next(runners)))
    assert c.rounds == 5 and c.faster


def test_a_second_block_short_of_the_test_alone_confirms_a_gain_it_shows_again():
    """The first block is won clearly; the second, on fresh sessions, shows the gain again (its
    median 10% below the input's) but wins only 3 of 5 rounds, short of the test on its own: the
    rounds pooled decide, and the candidate is faster. A second block whose median is within the
    margin does not confirm."""
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.profiler import compare_programs
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2,))))

    def scripted(second_block):
        sessions = iter(["b", "c", "b", "c"])
        runs = {"b": 0, "c": 0}

        def runner(graph, seed):
            who = next(sessions)

            def run():
                runs[who] += 1
                k = runs[who] - 1 - 2  # the round (after 2 warm-up runs), counted over both blocks
                if who == "b" or k < 0:
                    return 100.0
                if k < 5:
                    return 80.0                            # the first block: won every round
                return second_block[(k - 5 - 2) % 5]     # the second block, after its warm-up
            return run
        return runner

    again = [70.0, 70.0, 90.0, 104.0, 103.0]  # median 90: 10% below, 3 of 5 rounds won
    c = compare_programs(g, g, reps=5, warmup=2, runner=scripted(again))
    second = judge([100.0] * 5, again)
    assert not second.faster and c.rounds == 10 and c.faster
    within = [99.0, 99.5, 99.0, 101.0, 102.0]  # median 99.5: within the margin
    assert not compare_programs(g, g, reps=5, warmup=2, runner=scripted(within)).faster


def test_a_convolution_entry_keeps_its_kernels_shares():
    """The layout ops' entries say where their one-node session's kernel time went (onnxruntime's
    own profiler): shares that add up to one, the convolution's kernel the largest; other ops'
    entries do not carry them."""
    pytest.importorskip("onnxruntime")
    conv = signature_of(Op.CONV, {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1},
                        [TensorType((1, 32, 28, 28)), TensorType((32, 32, 3, 3))])
    mm = matmul_sig(16)
    run = profile_signatures([conv, mm], reps=3, layout_ops={Op.CONV})
    assert not run.failures and "kernel_share" not in run.entries[mm.key]
    share = run.entries[conv.key]["kernel_share"]
    assert sum(share.values()) == pytest.approx(1.0, abs=2e-3)
    assert max(share, key=share.get) in ("Conv", "FusedConv") and share[max(share, key=share.get)] > 0.5
    # where onnxruntime blocks convolutions at all (two chained in one program reorder around
    # the pair), the entry's own session shows the reorders: its weights are initializers
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.profiler import ort_kernel_times
    b = GraphBuilder("pair")
    x = b.input("x", (1, 32, 28, 28))
    for k in range(2):
        x = b.conv(x, b.weight(f"w{k}", (32, 32, 3, 3)), padding=(1, 1, 1, 1))
    if "ReorderOutput" in ort_kernel_times(b.build(x), runs=1):
        assert share.get("ReorderInput", 0) > 0 and share.get("ReorderOutput", 0) > 0


def test_the_second_block_runs_on_fresh_sessions():
    """Each session keeps the speed it drew (scripted, no timing): the candidate's first session
    is lucky and wins every round of the first block; the second block builds new sessions, the
    candidate's is no faster than the input's, and the verdict is not faster."""
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.profiler import compare_programs
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2,))))
    speeds = iter([100.0, 80.0, 100.0, 100.0])  # baseline, candidate; then the fresh pair
    built = []

    def session(graph, seed):
        us = next(speeds)
        built.append(us)
        return lambda: us

    c = compare_programs(g, g, reps=5, warmup=2, runner=session)
    assert built == [100.0, 80.0, 100.0, 100.0] and c.rounds == 10 and not c.faster


def test_the_packed_attention_is_timed_as_onnxruntime_s_contrib_attention():
    """cost "cpu" profiles packed_attention like any op: its one-node model is com.microsoft
    Attention with the packed weight and bias as initializers (pre-packed, as in a program)."""
    sig = signature_of(Op.PACKED_ATTENTION, {"num_heads": 2},
                       [TensorType((1, 8, 16)), TensorType((16, 48)), TensorType((48,)), TensorType((1, 1, 1, 8))])
    g = signature_graph(sig)
    assert g.inputs == ("in0", "in3") and set(g.weights) == {"in1", "in2"}
    written = to_onnx(g, contrib=True)
    assert [(n.domain, n.op_type) for n in written.graph.node] == [("", "Expand"), ("com.microsoft", "Attention")]
    run = profile_signatures([sig], reps=3, warmup=1)
    assert not run.failures and sig.key in run.entries and run.entries[sig.key]["raw_us"] > 0


def test_the_sessions_einsat_times_do_not_spin_wait_and_others_do():
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.backend_onnxruntime import new_session
    from einsat.runtime.profiler import ort_session

    b = GraphBuilder("g")
    x = b.input("x", (4, 4))
    g = b.build(b.add(x, x))
    key = "session.intra_op.allow_spinning"
    timed = ort_session(g, threads=2)
    assert timed.get_session_options().get_session_config_entry(key) == "0"
    plain = new_session(to_onnx(g).SerializeToString(), threads=2)
    with pytest.raises(RuntimeError):  # not set: onnxruntime's default, it spins
        plain.get_session_options().get_session_config_entry(key)


def _scripted_sessions(speeds):
    """Runners built in order from `speeds`, each a list of the µs its runs return (its last
    value repeated), and the list of those built."""
    from einsat.ir.builder import GraphBuilder
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2,))))
    plans, built = iter(speeds), []

    def session(graph, seed):
        values = list(next(plans))
        built.append(values)
        calls = itertools.count()
        return lambda: values[min(next(calls), len(values) - 1)]
    return g, session, built


def test_a_block_leaning_faster_short_of_a_verdict_is_taken_again_on_fresh_sessions():
    from einsat.runtime.profiler import LEANING_P, compare_programs
    # warm-up 2 runs, then 5 rounds: the candidate wins 4 by a fifth, loses 1 by a hair (p = 2/32)
    pilot = [100.0, 100.0, 100.5, 80.0, 80.0, 80.0, 80.0]
    g, session, built = _scripted_sessions([[100.0], pilot, [100.0], [80.0], [100.0], [80.0]])
    c = compare_programs(g, g, reps=5, warmup=2, runner=session)
    assert len(built) == 6  # the pilot's pair, the retake's, the confirmation's
    assert c.faster and c.rounds == 10 and c.speedup == pytest.approx(1.25)
    # the retake alone decides: fresh sessions that show nothing give no verdict of faster
    g, session, built = _scripted_sessions([[100.0], pilot, [100.0], [100.0]])
    c = compare_programs(g, g, reps=5, warmup=2, runner=session)
    assert len(built) == 4 and not c.faster and c.rounds == 5
    assert 0.05 < 2 / 32 < LEANING_P


def test_a_block_leaning_slower_or_without_confirmation_is_not_taken_again():
    from einsat.runtime.profiler import compare_programs
    g, session, built = _scripted_sessions([[100.0], [100.0, 100.0, 99.5, 120.0, 120.0, 120.0, 120.0]])
    c = compare_programs(g, g, reps=5, warmup=2, runner=session)
    assert len(built) == 2 and not c.faster  # leaning slower: no retake
    pilot = [100.0, 100.0, 100.5, 80.0, 80.0, 80.0, 80.0]
    g, session, built = _scripted_sessions([[100.0], pilot])
    c = compare_programs(g, g, reps=5, warmup=2, runner=session, confirm=False)
    assert len(built) == 2 and not c.faster  # a single block asked for: its verdict stands


def test_a_sampled_runner_runs_a_short_call_long_enough_and_gives_its_mean(monkeypatch):
    """A call of 0.2 ms sampled over 2 ms runs ten times per sample and gives their mean; a call
    longer than the sample runs once. The clock is the test's: each call moves it 0.2 ms."""
    import types

    from einsat.runtime import profiler
    clock = {"s": 0.0, "n": 0}
    monkeypatch.setattr(profiler, "time", types.SimpleNamespace(perf_counter=lambda: clock["s"]))

    def call():
        clock["n"] += 1
        clock["s"] += 2e-4
    run = profiler.sampled_runner(call, sample_us=2000.0)
    assert clock["n"] == 2  # two calls size the sample
    assert run() == pytest.approx(200.0) and clock["n"] == 12
    clock["n"] = 0
    run = profiler.sampled_runner(call, sample_us=100.0)
    assert run() == pytest.approx(200.0) and clock["n"] == 3  # longer than the sample: one call each
