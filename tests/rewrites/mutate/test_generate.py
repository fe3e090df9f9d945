"""The generator in a session: bounded, deterministic, memoised, silent without a cost model."""

import numpy as np

from einsat import GraphBuilder, Op
from einsat.egraph import Limits, Schedule, Session
from einsat.rewrites.mutate.generate import COUNTS, mutate_generator
from einsat.testing.egraphs import assert_consistent
from tests.rewrites.mutate.costs import paper_cost
from tests.rewrites.mutate.forms import behind, input_shape, session_with


def layers(n=8, c=3, h=5, w=6, depth=2):
    """`depth` convs of one shape (other weights), ReLUs between them."""
    b = GraphBuilder("layers")
    y = b.input("x", (n, c, h, w))
    for k in range(depth):
        y = b.conv(y, b.weight(f"w{k}", (c, c, 3, 3)), padding=1)
        y = b.relu(y) if k < depth - 1 else y
    return b.build(y)


def wide_is_faster(n=8, c=3, h=5, w=6):
    return paper_cost({((n, c, h, w), (c, c, 3, 3), (1, 1), 1): 40.0,
                       ((n // 2, c, h, 2 * w), (c, c, 3, 3), (1, 1), 1): 10.0})


def first_round(report) -> dict[str, int]:
    return next(r for r in report.rounds if r.generator == "pet-mutate").counts


def structure(data):
    return [(cid, sorted((str(n.op), n.children, str(sorted(n.attrs.items())), n.leaf, n.output) for n in c.nodes))
            for cid, c in sorted(data.classes.items())]


def test_without_a_cost_model_the_generator_does_nothing():
    s = Session()
    s.add_graph(layers())
    before = s.num_nodes()
    report = s.run(Schedule((mutate_generator(),)))
    assert first_round(report) == dict.fromkeys(COUNTS, 0) and s.num_nodes() == before


def test_the_same_program_gives_the_same_egraph():
    a, _ = session_with(layers(), wide_is_faster())
    b, _ = session_with(layers(), wide_is_faster())
    assert structure(a.export()) == structure(b.export())


def test_one_verification_serves_every_layer_of_one_shape():
    s, report = session_with(layers(depth=3), wide_is_faster())
    counts = first_round(report)
    assert counts["memo hits"] == 2 and counts["admitted"] >= 3
    data = s.export()
    convs = [c for c, cls in data.classes.items() if any(n.op is Op.CONV for n in cls.nodes) and cls.name]
    for c in convs:  # every layer's value holds its own corrected mutant
        assert any(fixed and input_shape(data, n) == (4, 3, 5, 12) for n, fixed in behind(data, c, Op.CONV))
    assert_consistent(data, rtol=1e-5, atol=1e-5)


def test_rounds_stay_within_the_limits():
    _, report = session_with(layers(depth=3), wide_is_faster(), subprograms=1, mutants=2)
    for r in report.rounds:
        assert r.counts["subprograms"] <= 1 and r.counts["mutants"] <= 2
    _, report = session_with(layers(depth=3), wide_is_faster(), generator_s=0.0)
    assert first_round(report)["subprograms"] == 0  # past its deadline before the first one


def test_later_rounds_mutate_the_sessions_best_program():
    calls = []

    def best(data):
        calls.append(len(data.classes))
        return {}

    s = Session(Limits(generator_s=60.0), cost=wide_is_faster(), best=best)
    s.add_graph(layers(depth=1))
    report = s.run(Schedule((mutate_generator(),)))
    assert calls and report.rounds[0].counts["admitted"] >= 1
    assert all(r.counts["subprograms"] == 0 for r in report.rounds[1:])


def test_entering_programs_bind_the_subprograms_weights_to_their_own_e_classes():
    s, _ = session_with(layers(depth=1), wide_is_faster())
    data = s.export()
    weights = [n.leaf[1] for c in data.classes.values() for n in c.nodes if n.leaf and n.leaf[0] == "weight"]
    assert [w for w in weights if np.asarray(data.weights[w]).shape == (3, 3, 3, 3)] == ["w0"]


def test_a_round_verifies_at_most_its_limit_of_mutants():
    _, report = session_with(layers(depth=3), wide_is_faster(), verifications=1)
    bounded = first_round(report)
    assert bounded["verified"] == 1 and bounded["subprograms"] == 1  # cut short: not memoised, no more taken
    _, unbounded = session_with(layers(depth=3), wide_is_faster())
    assert first_round(unbounded)["subprograms"] > 1 and first_round(unbounded)["memo hits"] == 2


def test_a_generator_whose_programs_the_cost_model_never_keeps_backs_off():
    """Under a cost model where the wide conv is slower, what PET admits is left out, and after
    each fruitless round the generator skips twice as many rounds (1 round, then 2 skipped, ...)."""
    from einsat.rewrites.mutate.generate import FIRST_VERIFICATIONS, mutate
    slow_wide = paper_cost({((8, 3, 5, 6), (3, 3, 3, 3), (1, 1), 1): 10.0,
                            ((4, 3, 5, 12), (3, 3, 3, 3), (1, 1), 1): 40.0})
    s = Session(Limits(), cost=slow_wide)
    s.add_graph(layers(depth=1))
    before = s.num_nodes()
    ran = []
    for _ in range(8):
        r = mutate(s, s.export())
        ran.append(not r.counts["backed off"])
        assert r.unions == 0 and r.counts["admitted"] == 0
        assert r.counts["verified"] <= FIRST_VERIFICATIONS  # a fruitless generator's allowance never grows
    assert ran == [True, False, False, True, False, False, False, False]
    assert s.num_nodes() == before
    # the same program under prices that make the wide conv faster enters it at once
    s = Session(Limits(), cost=wide_is_faster())
    s.add_graph(layers(depth=1))
    r = mutate(s, s.export())
    assert r.counts["admitted"] >= 1 and r.unions >= 1 and s.num_nodes() > before
