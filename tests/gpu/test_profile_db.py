"""Signatures and the profile database: JSON round trips, keys, lookups, merges."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.cost.profile_db import ProfileDB, device_kind
from einsat.errors import EinsatError
from einsat.ir.builder import GraphBuilder
from einsat.ir.registry import REGISTRY, Op
from einsat.ir.signature import (
    Signature,
    read_signatures,
    signature_of,
    signatures_of_graph,
    write_signatures,
)
from einsat.ir.types import TensorType
from tests.gpu.cases import strategy

PROFILED = sorted(op.value for op in REGISTRY if op not in (Op.CONSTANT, Op.LOOP, Op.IF, Op.OPAQUE))


@settings(max_examples=5)
@given(st.data())
def test_every_signature_survives_json(data):
    op = data.draw(st.sampled_from(PROFILED))
    case = data.draw(strategy(op))
    for sig in signatures_of_graph(case.graph):
        again = Signature.from_json(json.loads(json.dumps(sig.to_json())))
        assert again.key == sig.key and again == sig
        assert [t for t in sig.outputs()] == [t for t in again.outputs()]


def conv_graph(stride=2):
    b = GraphBuilder("g")
    x = b.input("x", (1, 4, 8, 8))
    y = b.relu(b.conv(x, b.weight("k", (8, 4, 3, 3)), stride=stride, padding=1))
    return b.build(b.relu(b.conv(y, b.weight("k2", (8, 8, 3, 3)), padding=1)))


def test_keys_are_canonical_whatever_the_spelling():
    t = [TensorType((1, 4, 8, 8)), TensorType((8, 4, 3, 3))]
    a = signature_of(Op.CONV, {"stride": 2, "padding": 1}, t)
    b = signature_of(Op.CONV, {"stride": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}, t)
    assert a.key == b.key == "conv|f32[1,4,8,8],f32[8,4,3,3]|dilation=(1,1);groups=1;padding=(1,1,1,1);stride=(2,2)"
    assert signature_of(Op.CONSTANT, {"value": np.zeros(2)}, []) is None


def test_signature_graph_runs_the_op():
    sig = signatures_of_graph(conv_graph())[0]
    g = sig.graph()
    assert [n.op for n in g.nodes] == [Op.CONV] and g.types["out0"] == sig.outputs()[0]
    assert sig.flops() == 2 * 8 * 4 * 4 * 4 * 9


def test_signature_file_round_trip(tmp_path):
    sigs = signatures_of_graph(conv_graph()) * 2
    path = tmp_path / "sigs.json"
    assert write_signatures(path, sigs) == 3  # conv, relu (both relus act on [1, 8, 4, 4]), conv
    back = read_signatures(path)
    assert [s.key for s in back] == list(dict.fromkeys(s.key for s in sigs))


def test_profile_lookup_save_load_merge(tmp_path):
    g = conv_graph()
    sigs = signatures_of_graph(g)
    db = ProfileDB(device={"name": "NVIDIA H100 80GB HBM3", "kind": "h100"})
    for k, s in enumerate(sigs):
        db.add(s, us=10.0 + k, warm_us=5.0 + k, flops=s.flops(), bytes=s.bytes(), kernels=1)
    path = tmp_path / "h100.json"
    db.save(path)
    back = ProfileDB.load(path)
    node = g.nodes[0]
    ins, outs = g.node_types(node)
    assert back.lookup(node.op, node.attrs, ins, outs) == 5.0
    back.mode = "us"
    assert back.lookup(node.op, node.attrs, ins, outs) == 10.0
    other_ins = [TensorType((2, 4, 8, 8)), ins[1]]
    assert back.lookup(node.op, node.attrs, other_ins, outs) is None
    newer = ProfileDB(device={"kind": "h100"})
    newer.add(sigs[0], us=99.0)
    back.merge(newer)
    assert back.entries[sigs[0].key]["us"] == 99.0 and len(back) == len(sigs)
    with pytest.raises(EinsatError, match="merge"):
        back.merge(ProfileDB(device={"kind": "h200"}))


def test_bad_profiles_are_rejected(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "something-else", "entries": {}}))
    with pytest.raises(EinsatError, match="not an einsat profile"):
        ProfileDB.load(path)
    path.write_text(json.dumps({"format": "einsat-profile/1", "entries": {"k": {"us": 1}}}))
    with pytest.raises(EinsatError, match="lacks"):
        ProfileDB.load(path)


def test_device_kinds():
    assert device_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert device_kind("NVIDIA H200") == "h200"
