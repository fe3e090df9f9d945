"""cuDNN's fused scaled dot-product attention (flash attention), through the cuDNN frontend's
graph API (`nvidia-cudnn-frontend`, the `cudnn` Python module of the `gpu` extra).

`plan_sdpa` decides, from shapes, strides and dtype alone (no device), whether an `attention`
node can run as one cuDNN SDPA operation, and says why not otherwise; the lowering
(`einsat.gpu.lower.attention`) then runs the unfused fallback (cuBLAS, a softmax kernel,
cuBLAS). cuDNN's SDPA engines take:

- fp16 or bf16 (its flash engines have no fp32: an fp32 program runs the fallback);
- q [b, h, sq, d], k [b, hk, sk, d], v [b, hk, sk, dv], hk dividing h (grouped-query and
  multi-query attention), head dims multiples of 8 up to 256, the head dim contiguous;
- an additive mask ("bias") [1 or b, 1 or h, sq, sk], and the causal triangle (top-left
  aligned, as einsat's `causal` is).

einsat's ranks 2 to 4 map onto [b, h, s, d] by leading 1s; q, k and v must agree on b (a batch
broadcast is left to the fallback). `SdpaGraphs` builds, per plan, the frontend graph
(validate, operation graph, heuristics A then the fallback list, support check, plans) on a
cuDNN handle, keeps it, and executes it on the current stream; a graph no engine supports is
remembered as such (`SdpaGraphs.refused`), and its attention runs the fallback. Nothing here
imports CuPy or egglog: shapes are tuples, pointers ints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_HEAD_DIM = 256
DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16"}


@dataclass(frozen=True)
class SdpaPlan:
    """One attention call as cuDNN sees it: [b, h, s, d] dims and element strides."""

    dtype: str
    q: tuple[tuple[int, ...], tuple[int, ...]]     # (dims, strides)
    k: tuple[tuple[int, ...], tuple[int, ...]]
    v: tuple[tuple[int, ...], tuple[int, ...]]
    o: tuple[tuple[int, ...], tuple[int, ...]]
    mask: tuple[tuple[int, ...], tuple[int, ...]] | None
    scale: float
    causal: bool


def _four(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """[.., s, d] of rank 2 to 4 as [b, h, s, d] (leading 1s, stride 0)."""
    if not 2 <= len(shape) <= 4:
        return None
    pad = 4 - len(shape)
    return (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)


def plan_sdpa(dtype, q, k, v, mask, out, scale: float, causal: bool) -> SdpaPlan | str:
    """The plan for attention over (shape, element strides) pairs `q`, `k`, `v`, `mask` (or None)
    and `out`, or the reason cuDNN's SDPA cannot run it."""
    name = np.dtype(dtype).name
    if name not in DTYPES:
        return f"cuDNN's SDPA engines take fp16 and bf16, not {name}"
    four = [_four(*t) for t in (q, k, v, out)]
    if any(f is None for f in four):
        return "q, k, v of rank 2 to 4 only"
    (qd, qs), (kd, ks), (vd, vs), (od, os_) = four
    if not (qd[0] == kd[0] == vd[0]):
        return f"the batch dims differ (q {qd[0]}, k {kd[0]}, v {vd[0]}): a broadcast batch runs the fallback"
    if kd[1] != vd[1] or qd[1] % kd[1]:
        return f"k/v heads ({kd[1]}, {vd[1]}) must be equal and divide q's ({qd[1]})"
    for label, d in (("head dim", qd[3]), ("value head dim", vd[3])):
        if d % 8 or d > MAX_HEAD_DIM:
            return f"the {label} {d} is no multiple of 8 up to {MAX_HEAD_DIM}"
    if any(dims[3] > 1 and st[3] != 1 for dims, st in ((qd, qs), (kd, ks), (vd, vs), (od, os_))):
        return "the head dim must be contiguous"
    m = None
    if mask is not None:
        mf = _four(*mask) if len(mask[0]) >= 2 else None
        if mf is None:
            return "a mask of rank 2 to 4 only"
        md, ms = mf
        if md[2:] != (qd[2], kd[2]) or md[0] not in (1, qd[0]) or md[1] not in (1, qd[1]):
            return (f"the mask {list(md)} must be [1|b, 1|h, sq, sk] (a broadcast over queries or keys runs "
                    "the fallback)")
        if md[3] > 1 and ms[3] != 1:
            return "the mask's key dim must be contiguous"
        m = (md, ms)
    return SdpaPlan(name, (qd, qs), (kd, ks), (vd, vs), (od, os_), m, float(scale), bool(causal))


def build_graph(cudnn, plan: SdpaPlan):
    """The frontend graph of `plan`, validated and lowered to its operation graph (no device
    needed); returns (graph, tensors by name)."""
    dt = getattr(cudnn.data_type, DTYPES[plan.dtype])
    g = cudnn.pygraph(io_data_type=dt, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    t = {}
    for label in ("q", "k", "v"):
        dims, strides = getattr(plan, label)
        t[label] = g.tensor(name=label, dim=list(dims), stride=list(strides), data_type=dt)
    extra = {}
    if plan.mask is not None:
        t["mask"] = g.tensor(name="mask", dim=list(plan.mask[0]), stride=list(plan.mask[1]), data_type=dt)
        extra["bias"] = t["mask"]
    o, _ = g.sdpa(name="attention", q=t["q"], k=t["k"], v=t["v"], generate_stats=False, attn_scale=plan.scale,
                  use_causal_mask=plan.causal, **extra)
    o.set_output(True).set_dim(list(plan.o[0])).set_stride(list(plan.o[1])).set_data_type(dt)
    t["o"] = o
    g.validate()
    g.build_operation_graph()
    return g, t


class SdpaGraphs:
    """Built SDPA graphs per plan on one cuDNN handle (the frontend's), executed on a stream."""

    def __init__(self, cudnn=None):
        if cudnn is None:
            import cudnn  # nvidia-cudnn-frontend
        self.cudnn = cudnn
        self.handle = cudnn.create_handle()
        self.graphs: dict[SdpaPlan, tuple] = {}
        self.refused: dict[SdpaPlan, str] = {}

    def prepare(self, plan: SdpaPlan) -> bool:
        """Build `plan`'s graph once (heuristics A, then the fallback list); False, with the
        reason in `refused`, when no engine supports it."""
        if plan in self.graphs:
            return True
        if plan in self.refused:
            return False
        try:
            g, t = build_graph(self.cudnn, plan)
            g.create_execution_plans([self.cudnn.heur_mode.A, self.cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
            self.graphs[plan] = (g, t, int(g.get_workspace_size()))
            return True
        except Exception as e:  # cuDNN raises its own error types: no engine, shape unsupported
            self.refused[plan] = f"{type(e).__name__}: {e}"[:300]
            return False

    def workspace_bytes(self, plan: SdpaPlan) -> int:
        return self.graphs[plan][2]

    def execute(self, plan: SdpaPlan, pointers: dict[str, int], workspace: int, stream: int) -> None:
        """Run the prepared `plan` over device pointers by tensor name (q, k, v, mask?, o)."""
        g, t, _ = self.graphs[plan]
        self.cudnn.set_stream(handle=self.handle, stream=stream)
        g.execute({t[name]: ptr for name, ptr in pointers.items()}, workspace, handle=self.handle)
