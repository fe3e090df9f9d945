"""Fused eOperators (eop, and eop_multi where a chain also writes a value read outside it) as
the fusion generator makes them (`rewrites.derive.fusion`): from the forms
of `tests.rewrites.derive.test_fusion_chains` at chosen shapes, and from the benchmark workloads
(bert_tensat, a BERT-base and a GPT-2 layer): each chain's eop as a one-node graph over inputs
of its children's types, for the kernel tests."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from einsat.cost.models import cost_model
from einsat.egraph import Limits, Schedule, Session
from einsat.ir import Graph, GraphBuilder, Op
from einsat.rewrites.derive.fusion import fusion_generator

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def fused_eops(graph: Graph) -> list[tuple[str, tuple]]:
    """(expr, input types) of every fused eop the generator unions into `graph`'s e-graph."""
    s = Session(Limits(iterations=1), cost=cost_model("h100-roofline"))
    s.add_graph(graph)
    s.run(Schedule((fusion_generator(),)))
    data = s.export()
    out = []
    for cid in sorted(data.classes):
        for n in data.classes[cid].nodes:
            if n.op in (Op.EOP, Op.EOP_MULTI):  # an eop_multi's `exprs`: its ' ; '-separated outputs
                out.append((n.attrs.get("expr") or n.attrs["exprs"], tuple(data.classes[c].type for c in n.children)))
    return sorted(set(out), key=str)


def eop_graph(expr: str, types, dtype=None) -> Graph:
    """A one-node graph: the eop of `expr`, or the eop_multi of several (' ; '-separated)."""
    b = GraphBuilder("fused")
    ins = [b.input(f"x{k}", t.shape, dtype or t.dtype) for k, t in enumerate(types)]
    if ";" in expr:
        return b.build(*b.eop_multi(*ins, exprs=expr))
    return b.build(b.eop(*ins, expr=expr))


@functools.lru_cache(maxsize=None)
def workload_eops(seq: int = 128) -> tuple[tuple[str, str, tuple], ...]:
    """(workload, expr, input types) of every fused eop of `workload_graphs`, distinct ones once."""
    seen, out = set(), []
    for name, g in workload_graphs(seq).items():
        for expr, types in fused_eops(g):
            if (expr, types) not in seen:
                seen.add((expr, types))
                out.append((name, expr, types))
    return tuple(out)


def workload_graphs(seq: int = 128) -> dict[str, Graph]:
    """The benchmark workloads whose fused kernels must compile: bert_tensat (its default
    shapes), one BERT-base layer and one GPT-2 layer at `seq` (the shapes repeat per layer)."""
    import einsat
    from benchmarks.workloads.transformer import bert_tensat
    out = {"bert_tensat": bert_tensat(layers=1)}
    for name, text in (("bert_base", ("input_ids", "attention_mask", "token_type_ids")),
                       ("gpt2", ("input_ids", "attention_mask"))):
        out[name] = einsat.load_onnx(MODELS / f"hf_{name}.onnx", fill_weights="random",
                                     input_shapes={k: (1, seq) for k in text})
    return out


def random_inputs(types, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"x{k}": rng.standard_normal(t.shape).astype(t.dtype) for k, t in enumerate(types)}
