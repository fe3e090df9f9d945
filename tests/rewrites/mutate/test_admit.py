"""Admission: only a corrected program proved equal to the subprogram gets in."""

import numpy as np

from einsat import GraphBuilder, Op
from einsat.cost.model import RooflineCost
from einsat.rewrites.mutate import admit as admit_module
from einsat.rewrites.mutate.admit import admit, cheaper, graph_cost
from einsat.testing.mutants import batch_to_width
from einsat.verify import find_differences
from einsat.verify.numeric import equivalent
from einsat.verify.placement import Placement

W = np.random.default_rng(0).standard_normal((3, 2, 3, 3)).astype(np.float32)


def original():
    b = GraphBuilder("conv")
    return b.build(b.conv(b.input("x", (4, 2, 5, 6)), b.weight("w", W), padding=1))


def test_a_partially_equivalent_mutant_enters_corrected():
    verdict = admit(original(), batch_to_width(4, 2, 5, 6, W, seed=0))
    assert verdict.graph is not None and verdict.corrected
    assert [n.op for n in verdict.graph.nodes].count(Op.CORRECT) == 1
    assert find_differences(original(), verdict.graph).equivalent and equivalent(original(), verdict.graph)


def test_an_equivalent_mutant_enters_without_a_correction():
    b = GraphBuilder("same")
    x = b.input("x", (4, 2, 5, 6))
    twice = b.transpose(b.transpose(x, perm=(0, 1, 3, 2)), perm=(0, 1, 3, 2))
    verdict = admit(original(), b.build(b.conv(twice, b.weight("w", W), padding=1)))
    assert verdict.graph is not None and not verdict.corrected
    assert Op.CORRECT not in {n.op for n in verdict.graph.nodes}


def test_a_fix_that_recomputes_the_whole_original_is_refused():
    b = GraphBuilder("doubled")
    x = b.input("x", (4, 2, 5, 6))
    twice = b.mul(b.conv(x, b.weight("w", W), padding=1), b.const(2.0))
    verdict = admit(original(), b.build(twice))
    assert verdict.graph is None and "whole" in verdict.reason


def test_a_correction_that_misses_a_region_is_refused(monkeypatch):
    real = admit_module.correct_placed

    def forgetful(o, m):  # drops the last Correct: the re-check must see the difference
        placed = real(o, m)
        g = placed.graph
        last = [n for n in g.nodes if n.op is Op.CORRECT][-1]
        nodes = [n if n is not last else n.__class__(Op.IDENTITY, [n.inputs[0]], n.outputs) for n in g.nodes]
        return Placement(g.replace(nodes=nodes), placed.at, placed.differences)

    monkeypatch.setattr(admit_module, "correct_placed", forgetful)
    verdict = admit(original(), batch_to_width(4, 2, 5, 6, W, seed=0))
    assert verdict.graph is None and "still differs" in verdict.reason


def test_the_pre_filter_needs_a_cheaper_core():
    mutant = batch_to_width(4, 2, 5, 6, W, seed=0)
    assert not cheaper(RooflineCost("h100"), original(), mutant)  # equal FLOPs: nothing to gain

    class WideIsFaster(RooflineCost):
        def node_cost(self, op, attrs, ins, outs):
            wide = op is Op.CONV and ins[0].shape[0] == 2
            return super().node_cost(op, attrs, ins, outs) * (0.5 if wide else 1.0)

    assert cheaper(WideIsFaster("h100"), original(), mutant)  # views are not counted


def test_a_target_that_runs_views_charges_the_mutant_its_views():
    """On onnxruntime (`views_run`) a mutant's reshapes and transposes are copies: a core
    cheaper by less than they cost is no gain (resnet18's measured profile admitted a
    reshaped Add "cheaper" by noise, and the e-graph grew fourfold for nothing)."""
    mutant = batch_to_width(4, 2, 5, 6, W, seed=0)

    class WideIsFaster(RooflineCost):
        def node_cost(self, op, attrs, ins, outs):
            if op is Op.CONV:
                return 100.0 * (0.8 if ins[0].shape[0] == 2 else 1.0)
            return 0.0 if op is Op.CONSTANT else 10.0  # every view is a 10 µs kernel

    views = sum(n.op is not Op.CONV and n.op is not Op.CONSTANT for n in mutant.nodes)
    assert views >= 3  # 80 + 10 * views > 100: the views eat the gain
    model = WideIsFaster("h100")
    assert cheaper(model, original(), mutant)  # views folded away: the core alone counts
    model.views_run = True
    assert not cheaper(model, original(), mutant)


class _ConvTimes:
    """A profile of convolutions by batch size (µs; None: not measured)."""

    def __init__(self, times):
        self.times = times

    def lookup(self, op, attrs, ins, outs):
        return self.times.get(ins[0].shape[0]) if op is Op.CONV else None


def test_a_profiles_model_compares_a_guessed_convolution_by_its_roofline():
    """A committed profile's model prices an unmeasured convolution by a guess: PET's gain is a
    measured algorithm switch, and a measured time against a guess (or two neighbours' guesses:
    EfficientNet's [1, 32, 112, 112] 1x1 convolution at 43.6 µs, its 16 tiles at 9.7 µs, both
    unmeasured on the H100) is none. The two sides are then both priced by the fallback roofline,
    under which equal FLOPs gain nothing."""
    from einsat.cost.profiled import MeasuredCost
    mutant = batch_to_width(4, 2, 5, 6, W, seed=0)
    measured = MeasuredCost(_ConvTimes({4: 100.0, 2: 50.0}), RooflineCost("h100"))
    assert not measured.guessed(original()) and not measured.guessed(mutant)
    assert cheaper(measured, original(), mutant)  # both measured: the wide form is faster
    guessed = MeasuredCost(_ConvTimes({4: 100.0}), RooflineCost("h100"))  # the wide form unmeasured
    assert guessed.guessed(mutant) and not guessed.guessed(original())
    assert graph_cost(guessed, mutant, core=True) < graph_cost(guessed, original())  # the guess alone "gains"
    assert not cheaper(guessed, original(), mutant)


def test_the_h100_profile_guesses_efficientnets_wide_convolution():
    from einsat.cost.profiled import MeasuredCost
    model = MeasuredCost("h100")
    b = GraphBuilder("pointwise")
    x = b.input("x", (1, 32, 112, 112))
    wide = b.build(b.conv(x, b.weight("w", np.ones((16, 32, 1, 1), np.float32))))
    assert model.guessed(wide)
    key = next(k for k, e in model.db.entries.items() if e["signature"]["op"] == Op.CONV.value)
    sig = model.db.signature(key)
    b = GraphBuilder("measured")
    shape_x, shape_w = sig.inputs[0].shape, sig.inputs[1].shape
    attrs = {k: v for k, v in sig.attr_dict.items()}
    g = b.build(b.op(Op.CONV, b.input("x", shape_x), b.weight("w", np.ones(shape_w, np.float32)),
                     *([b.weight("bias", np.ones(sig.inputs[2].shape, np.float32))] if len(sig.inputs) > 2 else []),
                     **attrs))
    assert model.db.lookup(Op.CONV, g.nodes[0].attrs, *g.node_types(g.nodes[0])) is not None
    assert not model.guessed(g)
