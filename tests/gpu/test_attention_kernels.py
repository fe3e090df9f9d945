"""The attentions of the benchmark workloads (bert_tensat, a BERT-base and a GPT-2 layer), as
the attention generator makes them: in fp16 each is a plan cuDNN's fused SDPA takes (and, with
the frontend installed, its graph validates); the unfused lowering's generated kernels (the mask
kernel, the softmax reading the causal triangle) compile through CuPy's NVRTC for sm_90 without
spills, in fp32 and fp16 (`make test-gpu-static`)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.device import nvrtc_options
from einsat.gpu.kernels.cudnn_sdpa import SdpaPlan, build_graph, plan_sdpa
from einsat.ir import GraphBuilder, Op
from einsat.runtime import run
from tests.gpu.host_device import HostDevice, KernelLibrary


@functools.lru_cache(maxsize=None)
def workload_attentions() -> tuple:
    """(workload, input types, attrs) of every attention the generator unions into the workloads."""
    from einsat.egraph import Limits, Schedule, Session
    from einsat.rewrites.algebra.attention import attention_generator
    from tests.gpu.fused_cases import workload_graphs
    out, seen = [], set()
    for name, g in workload_graphs().items():
        s = Session(Limits(iterations=1))
        s.add_graph(g)
        s.run(Schedule((attention_generator(),)))
        data = s.export()
        for cls in data.classes.values():
            for n in cls.nodes:
                if n.op is Op.ATTENTION:
                    key = (name, tuple(data.classes[c].type for c in n.children), tuple(sorted(n.attrs.items())))
                    if key not in seen:  # one per signature and workload (GPT-2's equal BERT-base's)
                        seen.add(key)
                        out.append(key)
    return tuple(out)


def attention_graph(types, attrs, dtype):
    b = GraphBuilder("attention")
    ins = [b.input(f"x{k}", t.shape, dtype) for k, t in enumerate(types)]
    return b.build(b.attention(*ins, **dict(attrs)))


@pytest.mark.slow
def test_every_workload_has_attentions():
    names = {w for w, _, _ in workload_attentions()}
    assert names == {"bert_tensat", "bert_base", "gpt2"}


def _dense(shape):
    return tuple(shape), tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))


@pytest.mark.slow  # make test stays within 6 minutes (its time moved to make test-slow)
def test_in_fp16_cudnn_sdpa_takes_every_workload_attention():
    for name, types, attrs in workload_attentions():
        a = dict(attrs)
        out = types[0].shape[:-1] + (types[2].shape[-1],)
        # the generator's k may be a transpose of kᵀ (a view): its head dim keeps unit stride
        plan = plan_sdpa(np.float16, *(_dense(t.shape) for t in types[:3]),
                         _dense(types[3].shape) if len(types) > 3 else None, _dense(out), a["scale"], a["causal"])
        assert isinstance(plan, SdpaPlan), f"{name}: {plan}"


def test_the_fallback_kernels_compile_for_sm90(cupy_module):
    from tests.gpu.cupy_jit import compile_like_rawkernel
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    for _, types, attrs in workload_attentions():
        for dtype in (np.float32, np.float16):
            g = attention_graph(types, attrs, dtype)
            run(g, {n: np.zeros(g.types[n].shape, dtype) for n in g.inputs}, backend=GpuBackend(dry, name="dry"))
    kernels = {k.name: k for k in dry.recorded}
    assert {k.family for k in kernels.values()} >= {"softmax"}
    for k in kernels.values():
        c = compile_like_rawkernel(cupy_module, k.source, k.name, nvrtc_options(k))
        assert c.spill_bytes == 0 and 0 < c.registers, (k.name, c.spill_bytes, c.registers)


def test_the_frontend_graphs_of_the_workload_attentions_validate(pytestconfig):
    try:
        import cudnn
    except Exception as e:
        from tests.gpu.conftest import missing_gpu_libs
        missing_gpu_libs(pytestconfig, f"the cuDNN frontend (nvidia-cudnn-frontend) is not importable ({e})")
    for name, types, attrs in workload_attentions():
        a = dict(attrs)
        out = types[0].shape[:-1] + (types[2].shape[-1],)
        plan = plan_sdpa(np.float16, *(_dense(t.shape) for t in types[:3]),
                         _dense(types[3].shape) if len(types) > 3 else None, _dense(out), a["scale"], a["causal"])
        graph, tensors = build_graph(cudnn, plan)
        assert list(tensors["o"].get_dim()) == list(plan.o[0]), name

