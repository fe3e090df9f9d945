"""PyTorch baselines built from the same program: an `ir.Graph` as a `torch.nn.Module`.

The module interprets the graph op by op with PyTorch's own kernels (cuDNN convolutions, cuBLAS
GEMMs on a GPU), holding the graph's weights as buffers, so eager PyTorch and `torch.compile`
run exactly the program einsat runs, with the same weights. Each op follows the einsat registry
semantics (ONNX's), e.g. ONNX pads (all begins, then all ends) and average pools that exclude
the padding unless `count_include_pad`.

This file imports neither einsat nor egglog: it runs wherever torch and NumPy are (the GPU
machine; the Python 3.11 `.torch-venv` on CPU machines). Graphs travel as *plain graphs*:
dicts of builtins and NumPy arrays (`plain_graph(graph)`, picklable). Command line:

    python -m benchmarks.torch_baseline [--compile [--mode M]] CASE_DIR...   # graph.pkl + inputs.npz in each
    python -m benchmarks.torch_baseline --time 15 CASE_DIR...     # CPU wall times, times.npz
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # plain_graph() still works without torch
    torch = F = None


def plain_graph(graph) -> dict:
    """An `ir.Graph` as builtins and NumPy arrays: nodes (op name, inputs, outputs, attributes),
    inputs with shapes and dtypes, outputs, weights."""
    return {
        "name": graph.name,
        "inputs": [(n, tuple(graph.types[n].shape), graph.types[n].dtype.name) for n in graph.inputs],
        "outputs": list(graph.outputs),
        "weights": {k: np.asarray(v) for k, v in graph.weights.items()},
        "nodes": [{"op": n.op.value, "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                   "attrs": dict(n.attrs)} for n in graph.nodes],
    }


# -- ops ---------------------------------------------------------------------------------------

def _sp(pads, nsp):
    """ONNX pads (begins, ends) → (symmetric torch padding or None, F.pad widths last dim first)."""
    begins, ends = pads[:nsp], pads[nsp:]
    widths = [w for i in reversed(range(nsp)) for w in (begins[i], ends[i])]
    return (tuple(begins) if tuple(begins) == tuple(ends) else None), widths


def _conv(x, w, b=None, *, stride, padding, dilation, groups):
    nsp = w.dim() - 2
    sym, widths = _sp(padding, nsp)
    if sym is None:
        x, sym = F.pad(x, widths), (0,) * nsp
    fn = (F.conv1d, F.conv2d, F.conv3d)[nsp - 1]
    return fn(x, w, b, tuple(stride), sym, tuple(dilation), groups)


def _conv_transpose(x, w, b=None, *, stride, padding, dilation, groups, output_padding):
    nsp = w.dim() - 2
    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nsp - 1]
    y = fn(x, w, b, tuple(stride), 0, tuple(output_padding), groups, tuple(dilation))
    idx = tuple(slice(padding[i], y.shape[2 + i] - padding[nsp + i]) for i in range(nsp))
    return y[(slice(None), slice(None)) + idx]


def _pool_fn(kind, nsp):
    return getattr(F, f"{kind}_pool{nsp}d")


def _avgpool(x, *, kernel, stride, padding, count_include_pad, ceil_mode):
    nsp = x.dim() - 2
    sym, widths = _sp(padding, nsp)
    pool = _pool_fn("avg", nsp)
    if sym is not None and (count_include_pad or not any(sym)):  # torch's own semantics agree
        return pool(x, tuple(kernel), tuple(stride), sym, bool(ceil_mode), bool(count_include_pad))
    total = pool(F.pad(x, widths), tuple(kernel), tuple(stride), 0, bool(ceil_mode), True)
    if count_include_pad:
        return total
    ones = F.pad(torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device), widths)
    return total / pool(ones, tuple(kernel), tuple(stride), 0, bool(ceil_mode), True)


def _maxpool(x, *, kernel, stride, padding, dilation, ceil_mode):
    nsp = x.dim() - 2
    sym, widths = _sp(padding, nsp)
    if sym is None or any(2 * p > k for p, k in zip(sym, kernel)):
        x, sym = F.pad(x, widths, value=-math.inf), (0,) * nsp
    return _pool_fn("max", nsp)(x, tuple(kernel), tuple(stride), sym, tuple(dilation), bool(ceil_mode))


def _band(x, width, dilation, rows):
    """x [Z, M, C] → its band rows [Z, len(rows), C, 2W+1] (see einsat/ir/ops/banded.py)."""
    pad = dilation * width
    xp = F.pad(x, (0, 0, pad, pad))[:, rows.start:rows.stop + 2 * pad]
    return xp.unfold(1, 2 * pad + 1, 1)[..., ::dilation]


def _row_chunks(z, m, c, band, itemsize, budget=1 << 30):
    """Row ranges whose materialized band stays under `budget` bytes."""
    step = max(1, budget // max(1, z * c * band * itemsize))
    return [range(s, min(m, s + step)) for s in range(0, m, step)]


def _g2bmm(a, b, *, width, dilation):
    z, m, k = a.shape
    outs = [torch.matmul(a[:, r.start:r.stop, None, :], _band(b, width, dilation, r))[:, :, 0, :]
            for r in _row_chunks(z, m, k, 2 * width + 1, a.element_size())]
    return torch.cat(outs, dim=1)


def _gbmm(p, v, *, dilation):
    z, m, n = v.shape
    width = (p.shape[2] - 1) // 2
    outs = [torch.matmul(_band(v, width, dilation, r), p[:, r.start:r.stop, :, None])[..., 0]
            for r in _row_chunks(z, m, n, p.shape[2], v.element_size())]
    return torch.cat(outs, dim=1)


def _gemm(a, b, c=None, *, alpha, beta, trans_a, trans_b):
    y = torch.matmul(a.T if trans_a else a, b.T if trans_b else b)
    y = y * alpha if alpha != 1 else y
    return y if c is None else y + (c * beta if beta != 1 else c)


def _layernorm(x, scale, bias=None, *, axis, epsilon):
    shape = tuple(x.shape[axis:])
    if tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape):
        return F.layer_norm(x, shape, scale, bias, epsilon)
    dims = tuple(range(axis, x.dim()))
    d = x - x.mean(dims, keepdim=True)
    y = d / torch.sqrt((d * d).mean(dims, keepdim=True) + epsilon) * scale
    return y if bias is None else y + bias


def _attention(q, k, v, mask=None, *, scale, causal):
    """einsat's attention (softmax(q kᵀ · scale + mask) v, batch dims broadcast) as its chain."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s + mask
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, -1), v)


def _reduce(fn):
    def run(x, *, axes, keepdims):
        return fn(x, dim=tuple(axes) or tuple(range(x.dim())), keepdim=bool(keepdims))
    return run


def _slice(x, *, starts, ends, axes, steps):
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st > 0:
            x = x[(slice(None),) * a + (slice(s, e, st),)]
        else:
            idx = torch.arange(s, e if e >= 0 else -1, st, device=x.device)
            x = x.index_select(a, idx)
    return x


def _unsqueeze(x, *, axes):
    for a in sorted(axes):
        x = x.unsqueeze(a)
    return x


def _gather(data, idx, *, axis):
    n = data.shape[axis]
    flat = torch.remainder(idx.reshape(-1).long(), n)
    out = data.index_select(axis, flat)
    return out.reshape(tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))


def _pad(x, *, pads, mode, value):
    r = x.dim()
    widths = [w for i in reversed(range(r)) for w in (pads[i], pads[r + i])]
    if mode == "constant":
        return F.pad(x, widths, value=value)
    return F.pad(x, widths, mode={"reflect": "reflect", "edge": "replicate"}[mode])


def _div(a, b):
    if a.dtype.is_floating_point:
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


def _op_table() -> dict:
    """Op name → torch implementation (positional tensors, keyword attributes)."""
    return {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": _div,
        "relu": lambda x: torch.relu(x), "sigmoid": lambda x: torch.sigmoid(x), "tanh": lambda x: torch.tanh(x),
        "erf": lambda x: torch.erf(x), "exp": lambda x: torch.exp(x), "log": lambda x: torch.log(x),
        "sqrt": lambda x: torch.sqrt(x), "neg": lambda x: -x, "abs": lambda x: torch.abs(x),
        "floor": lambda x: torch.floor(x), "pow": lambda a, b: torch.pow(a, b),
        "maximum": lambda a, b: torch.maximum(a, b), "minimum": lambda a, b: torch.minimum(a, b),
        "gelu": lambda x, *, approximate: F.gelu(x, approximate=approximate),
        "leaky_relu": lambda x, *, alpha: F.leaky_relu(x, alpha),
        "where": lambda c, a, b: torch.where(c, a, b),
        "matmul": lambda a, b: torch.matmul(a, b), "batchmatmul": lambda a, b: torch.bmm(a, b),
        "gemm": _gemm, "g2bmm": _g2bmm, "gbmm": _gbmm,
        "conv": _conv, "conv_transpose": _conv_transpose, "avgpool": _avgpool, "maxpool": _maxpool,
        "global_avgpool": lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True),
        "batchnorm": lambda x, s, b, m, v, *, epsilon: F.batch_norm(x, m, v, s, b, False, 0.0, epsilon),
        "layernorm": _layernorm, "softmax": lambda x, *, axis: torch.softmax(x, axis), "attention": _attention,
        "reduce_sum": _reduce(torch.sum), "reduce_mean": _reduce(torch.mean),
        "reduce_max": _reduce(torch.amax), "reduce_min": _reduce(torch.amin),
        "transpose": lambda x, *, perm: x.permute(*(perm if perm is not None else reversed(range(x.dim())))),
        "reshape": lambda x, *, shape: x.reshape(shape),
        "flatten": lambda x, *, axis: x.reshape(math.prod(x.shape[:axis]), -1),
        "squeeze": lambda x, *, axes: x.squeeze(tuple(axes)) if axes is not None else x.squeeze(),
        "unsqueeze": _unsqueeze,
        "expand": lambda x, *, shape: torch.broadcast_to(x, torch.broadcast_shapes(x.shape, tuple(shape))),
        "concat": lambda *xs, axis: torch.cat(xs, dim=axis),
        "split": lambda x, *, axis, sizes: list(torch.split(x, list(sizes), dim=axis)),
        "slice": _slice, "pad": _pad, "gather": _gather, "identity": lambda x: x,
    }


OPS = _op_table() if torch is not None else {}


class TorchProgram(torch.nn.Module if torch is not None else object):
    """A plain graph as a module: `TorchProgram(plain)(*inputs)` returns the graph's outputs."""

    def __init__(self, plain: dict):
        super().__init__()
        self.plain = plain
        unknown = sorted({n["op"] for n in plain["nodes"]} - set(OPS) - {"constant"})
        if unknown:
            raise NotImplementedError(f"graph {plain['name']!r}: the torch baseline has no "
                                      f"implementation of {', '.join(unknown)}")
        self.names = {}
        for k, (name, array) in enumerate(plain["weights"].items()):
            self.register_buffer(f"w{k}", torch.from_numpy(np.array(array)))
            self.names[name] = f"w{k}"
        for node in plain["nodes"]:
            if node["op"] == "constant":
                key = f"c{len(self.names)}"
                self.register_buffer(key, torch.from_numpy(np.array(node["attrs"]["value"])))
                self.names[node["outputs"][0]] = key

    def forward(self, *inputs):
        env = {name: getattr(self, key) for name, key in self.names.items()}
        env.update(zip((n for n, _, _ in self.plain["inputs"]), inputs))
        for node in self.plain["nodes"]:
            if node["op"] == "constant":
                continue
            args = [env[i] if i else None for i in node["inputs"]]
            while args and args[-1] is None:
                args.pop()
            try:
                out = OPS[node["op"]](*args, **node["attrs"])
            except Exception as e:
                raise RuntimeError(f"node {node['name']!r} ({node['op']}) failed in torch: {e}") from e
            outs = out if isinstance(out, (list, tuple)) else [out]
            env.update(zip(node["outputs"], outs))
        return tuple(env[o] for o in self.plain["outputs"])


def set_precision(tf32: bool = False) -> None:
    """fp32 everywhere unless `tf32`: no TF32 in cuBLAS or cuDNN, cuDNN autotuning on."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def compiled(module, mode: str = "max-autotune-no-cudagraphs"):
    """`torch.compile` as the benchmarks use it (Inductor, whole graph, static shapes); `mode` one
    of torch's: "max-autotune-no-cudagraphs" (autotuned, no CUDA graphs: the CPU tests), or the
    two a GPU user picks, `COMPILE_MODES`."""
    torch._dynamo.reset()  # each mode compiles afresh, not from the previous mode's cache
    return torch.compile(module, mode=mode, fullgraph=True, dynamic=False)


# the torch.compile modes every GPU table times beside eager: CUDA graphs over Inductor's kernels,
# and Inductor autotuning its GEMMs and convolutions (Triton templates against cuBLAS/cuDNN) as well
COMPILE_MODES = ("reduce-overhead", "max-autotune")
COMPILE_TIMEOUT_S = 300.0  # max-autotune may take minutes on convolutions: past this, "compile timed out"


class CompileTimeout(Exception):
    pass


def first_call(fn, args, timeout_s: float = COMPILE_TIMEOUT_S):
    """`fn(*args)` once (for a compiled module: the compile, autotuning included), stopped by
    SIGALRM after `timeout_s` with `CompileTimeout` (in the main thread of a Unix process; a
    plain call elsewhere). Returns the outputs, cloned (CUDA graphs reuse their output buffers)."""
    import signal
    import threading
    armed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    fired = []
    message = f"compile timed out after {timeout_s:g} s"

    def fire(signum, frame):
        fired.append(True)
        raise CompileTimeout(message)

    if armed:
        previous = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 1e-3))
    try:
        outs = fn(*args)
        return tuple(o.clone() for o in outs)
    except Exception as e:  # dynamo wraps what its frames raise (InternalTorchDynamoError)
        if fired:
            raise CompileTimeout(message) from e
        raise
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def run_case(directory: str, compile: bool = False, mode: str | None = None,
             timeout_s: float = COMPILE_TIMEOUT_S) -> str:
    """Run `directory`/graph.pkl on `directory`/inputs.npz; write eager.npz, or with `compile`
    compiled.npz (`mode`: a torch.compile mode, its outputs in compiled-MODE.npz). A compile
    that takes over `timeout_s` writes `compile-timeout[-MODE].txt` instead."""
    with open(f"{directory}/graph.pkl", "rb") as f:
        plain = pickle.load(f)
    feeds = np.load(f"{directory}/inputs.npz")
    module = TorchProgram(plain).eval()
    run = (compiled(module, mode) if mode else compiled(module)) if compile else module
    stem = "eager" if not compile else f"compiled-{mode}" if mode else "compiled"
    with torch.inference_mode():
        try:
            outs = first_call(run, tuple(torch.from_numpy(feeds[n]) for n, _, _ in plain["inputs"]), timeout_s)
        except CompileTimeout as e:
            path = f"{directory}/compile-timeout{'-' + mode if mode else ''}.txt"
            with open(path, "w") as f:
                f.write(str(e) + "\n")
            return path
    path = f"{directory}/{stem}.npz"
    np.savez(path, **{n: o.numpy() for n, o in zip(plain["outputs"], outs)})
    return path


def time_case(directory: str, reps: int, compile: bool = False) -> str:
    """Wall times (ms) of `reps` runs of `directory`/graph.pkl on one CPU thread after 3 warm-up
    runs, eager (and compiled with `compile`); written to `directory`/times.npz."""
    import time
    torch.set_num_threads(1)
    with open(f"{directory}/graph.pkl", "rb") as f:
        plain = pickle.load(f)
    feeds = np.load(f"{directory}/inputs.npz")
    args = tuple(torch.from_numpy(feeds[n]) for n, _, _ in plain["inputs"])
    module = TorchProgram(plain).eval()
    times = {}
    for kind, run in [("eager", module)] + ([("compile", compiled(module))] if compile else []):
        with torch.inference_mode():
            for _ in range(3):
                run(*args)
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                run(*args)
                ts.append((time.perf_counter() - t0) * 1e3)
        times[kind] = np.array(ts)
    path = f"{directory}/times.npz"
    np.savez(path, **times)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="run plain graphs with PyTorch on the CPU (eager or compiled)")
    p.add_argument("cases", nargs="+", help="directories holding graph.pkl (a pickled plain_graph) "
                   "and inputs.npz; the outputs go to eager.npz or compiled.npz beside them")
    p.add_argument("--compile", action="store_true", help="run through torch.compile as well")
    p.add_argument("--mode", help="the torch.compile mode (default max-autotune-no-cudagraphs; the GPU "
                   f"tables time {' and '.join(COMPILE_MODES)})")
    p.add_argument("--compile-timeout", type=float, default=COMPILE_TIMEOUT_S, metavar="S",
                   help="stop a compile after S seconds and record 'compile timed out'")
    p.add_argument("--time", type=int, metavar="REPS", help="time REPS runs on one CPU thread instead "
                   "(times.npz, ms)")
    args = p.parse_args(argv)
    set_precision(tf32=False)
    if args.time:
        for d in args.cases:
            print(time_case(d, args.time, args.compile))
        return 0
    for d in args.cases:
        print(run_case(d))
        if args.compile:
            print(run_case(d, compile=True, mode=args.mode, timeout_s=args.compile_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
