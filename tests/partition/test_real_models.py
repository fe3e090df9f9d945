"""The transformers exports cut into one piece per layer, the layers sharing one fingerprint."""

import pytest

import einsat
from einsat.partition import Partitioning, canonical, partition
from tests.ir.test_models import MODELS

TEXT = {"bert_base": ("input_ids", "attention_mask", "token_type_ids"), "gpt2": ("input_ids", "attention_mask"),
        "distilbert": ("input_ids", "attention_mask")}
LAYERS = {"bert_base": 12, "gpt2": 12, "distilbert": 6}


@pytest.mark.parametrize("name", [pytest.param("bert_base", marks=pytest.mark.slow), "distilbert",
                                  pytest.param("gpt2", marks=pytest.mark.slow)])
def test_every_layer_is_a_piece_and_the_repeated_ones_share_a_fingerprint(name):
    graph = einsat.load_onnx(MODELS / f"hf_{name}.onnx", fill_weights="random",
                             input_shapes={k: (1, 16) for k in TEXT[name]})
    assert len(graph.nodes) > Partitioning().above  # optimize partitions it by default
    pieces, cuts = partition(graph)
    keys = [canonical(p.graph).key for p in pieces]
    most = max(set(keys), key=keys.count)
    # every layer is one piece, the last included (GPT-2's feeds the final norm alone: a repeat cut)
    assert keys.count(most) == LAYERS[name]
    assert len(pieces) <= LAYERS[name] + 3
    assert all(len(p.graph.nodes) <= Partitioning().piece_nodes for p in pieces)
    assert not any(c.forced for c in cuts) and all(len(c.values) <= 2 for c in cuts)
    assert sum(c.repeat for c in cuts) == (name == "gpt2")
    layer = pieces[keys.index(most)].graph
    assert len(layer.inputs) <= 2 and len(layer.outputs) == 1  # the hidden state (and the mask) in, one out
    assert {"matmul", "softmax"} <= set(layer.op_counts())


def test_a_legacy_llama_export_reuses_its_repeated_layer():
    """A 4-layer Llama from the TorchScript exporter (#39): its layers write the KV cache
    (`present.<layer>.key/value`, graph outputs no later node reads), which used to count as
    crossing every later boundary, so no boundary inside a layer was a candidate and the forced
    64-node cuts fell at a different place in every layer: six pieces, none reused. Now the
    cache crosses nothing, the three inner copies of the layer are cut alike and share their
    fingerprints."""
    graph = einsat.load_onnx(MODELS / "hf_llama4_prefill_legacy_static.onnx", fill_weights="random")
    assert len(graph.nodes) > Partitioning().above
    pieces, cuts = partition(graph)
    keys = [canonical(p.graph).key for p in pieces]
    repeated = [k for k in set(keys) if keys.count(k) >= 3]
    assert len(repeated) >= 1 and sum(keys.count(k) for k in repeated) >= 6
    assert len(set(keys)) <= len(pieces) - 4
    # the last layer too, though it runs on into the final norm: its tail piece is that of the others
    assert max(keys.count(k) for k in repeated) == 4 and len(set(keys)) == 5
    assert not any(c.forced for c in cuts)
    assert all(len(p.graph.nodes) <= Partitioning().piece_nodes for p in pieces)
    cache = {o for o in graph.outputs if o.startswith("present.")}
    assert len(cache) == 8 and not any(cache & set(c.values) for c in cuts)
