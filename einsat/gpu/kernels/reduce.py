"""Reduction kernels: reduce (sum, mean, max), cumsum, softmax, layer normalization, LRN, pooling.

A reduction maps each output element (a "row") to a set of input elements. Two shapes of
kernel cover every size: a thread per row with a serial loop when rows are short
(`SERIAL_MAX` elements or fewer), and a block per row whose threads stride over the row and
combine with a warp-shuffle block reduction when rows are long. Accumulation is in the
compute type's accumulator (float for fp32/fp16, double for fp64, 64-bit for integers).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import (
    Kernel,
    Param,
    block_rows,
    broadcast_strides,
    coalesce,
    contiguous_strides,
    ctype,
    decompose,
    dot,
    extent,
    grid_stride,
    make_kernel,
    memoize,
    numel,
)
from einsat.gpu.kernels.elementwise import Operand

SERIAL_MAX = 64  # rows at most this long get one thread each


def _span(*ops) -> int:
    """The index bound of a kernel over these operands (outputs are contiguous, no larger)."""
    return max(max(extent(o.shape, o.strides), numel(o.shape)) for o in ops if o is not None)


def _block_size(n: int) -> int:
    return 256 if n >= 2048 else 128 if n >= 512 else 64 if n >= 128 else 32


def _split(op: Operand, axes: Sequence[int]):
    """(kept shape, kept strides, reduced shape, reduced strides), each coalesced."""
    kept = [k for k in range(len(op.shape)) if k not in axes]
    ks, (kst,) = coalesce([op.shape[k] for k in kept], [[op.strides[k] for k in kept]])
    rs, (rst,) = coalesce([op.shape[k] for k in axes], [[op.strides[k] for k in axes]])
    return ks, kst, rs, rst


def _max_expr(acc: str, v: str, pick: str = ">") -> str:
    return f"(({v} {pick} {acc} || {v} != {v}) ? {v} : {acc})"  # NaN wins, as in NumPy


@memoize
def reduce_kernel(src: Operand, axes: Sequence[int], kind: str = "sum", serial_max: int = SERIAL_MAX) -> Kernel:
    """out[kept...] = sum / mean / max / min of src over `axes` (output contiguous over kept dims)."""
    if kind not in ("sum", "mean", "max", "min"):
        raise ExecutionError(f"unknown reduction {kind!r}")
    axes = sorted(set(axes))
    ks, kst, rs, rst = _split(src, axes)
    n_out, n_red = numel(ks), numel(rs)
    ct = ctype(src.dtype)
    extremum = kind in ("max", "min")
    acc_t = ct.compute if extremum else ct.acc
    init = "0" if not extremum else (ct.lowest() if kind == "max" else ct.highest())
    if extremum and n_red == 0:
        raise ExecutionError(f"{kind} over an empty set of elements (shape {list(src.shape)}, axes {axes})")
    k_coords = [f"k{j}" for j in range(len(ks))]
    r_coords = [f"q{j}" for j in range(len(rs))]
    load = ct.load(f"in0[base + {dot(r_coords, rst)}]")
    combine = f"acc = {_max_expr('acc', 'v', '>' if kind == 'max' else '<')};" if extremum else "acc += v;"
    inner = (f"{decompose('r', rs, 'q', '            ')}\n"
             f"            const {acc_t} v = ({acc_t}){load};\n            {combine}")
    final = f"acc / ({acc_t}){max(n_red, 1)}" if kind == "mean" else "acc"
    head = (f"{decompose('o', ks, 'k')}\n        const idx_t base = {dot(k_coords, kst)};\n"
            f"        {acc_t} acc = {init};")
    params = [Param("in0", "in", src.dtype), Param("out", "out", src.dtype)]
    if n_red <= serial_max:
        body = (f"        const idx_t o = i;\n{head}\n"
                f"        for (idx_t r = 0; r < {n_red}LL; ++r) {{\n{inner}\n        }}\n"
                f"        out[o] = {ct.save(final)};")
        return make_kernel(f"reduce_{kind}", params, grid_stride(body, n_out), n_out,
                           span=extent(src.shape, src.strides))
    if kind == "min":  # the block reduction has sum and max: take the row serially instead
        return reduce_kernel(src, axes, kind, serial_max=n_red)
    block = _block_size(n_red)
    red = "einsat_block_max" if kind == "max" else "einsat_block_sum"
    body = (f"        const idx_t o = row;\n{head}\n"
            f"        for (idx_t r = threadIdx.x; r < {n_red}LL; r += blockDim.x) {{\n{inner}\n        }}\n"
            f"        acc = {red}(acc, smem);\n"
            f"        if (threadIdx.x == 0) out[o] = {ct.save(final)};")
    body = f"    __shared__ {acc_t} smem[32];\n" + block_rows(body, n_out)
    return make_kernel(f"reduce_{kind}", params, body, n_out, block=block, per_block=1,
                       span=extent(src.shape, src.strides))


@memoize
def softmax_kernel(src: Operand, axis: int, serial_max: int = SERIAL_MAX, causal_rows: int = 0,
                   out_dtype=None) -> Kernel:
    """out = exp(x - max) / sum(exp(x - max)) along `axis` (output contiguous, src's shape).

    `causal_rows` = Sq > 0 (attention's scores [..., Sq, Sk], `axis` the last): element j of
    row o reads as -inf when j > o mod Sq, the causal triangle, with no mask in memory.
    `out_dtype` (default src's): the probabilities' dtype, e.g. half from fp32 scores. The max
    and the sum are in the compute type (float for the halves)."""
    r = len(src.shape)
    n = src.shape[axis]
    ct = ctype(src.dtype)
    oc = ctype(out_dtype if out_dtype is not None else src.dtype)
    if not ct.is_float or not oc.is_float:
        raise ExecutionError(f"softmax needs a float input and output, got {src.dtype} -> {oc.dtype}")
    ostr = contiguous_strides(src.shape)
    kept = [k for k in range(r) if k != axis]
    ks, (kin, kout) = coalesce([src.shape[k] for k in kept],
                               [[src.strides[k] for k in kept], [ostr[k] for k in kept]])
    sa, so = src.strides[axis], ostr[axis]
    kc = [f"k{j}" for j in range(len(ks))]
    t = ct.compute
    x = ct.load(f"in0[bi + j * {sa}LL]")
    if causal_rows:
        x = f"(j > o % {causal_rows}LL ? {ct.literal(-np.inf)} : {x})"
    head = (f"{decompose('o', ks, 'k')}\n        const idx_t bi = {dot(kc, kin)}, bo = {dot(kc, kout)};")
    exp = ct.fn("exp")
    params = [Param("in0", "in", src.dtype), Param("out", "out", oc.dtype)]
    n_rows = numel(ks)
    if n <= serial_max:
        body = (f"        const idx_t o = i;\n{head}\n        {t} m = {ct.literal(-np.inf)}, s = 0;\n"
                f"        for (idx_t j = 0; j < {n}LL; ++j) {{ const {t} v = {x}; m = {_max_expr('m', 'v')}; }}\n"
                f"        for (idx_t j = 0; j < {n}LL; ++j) s += {exp}({x} - m);\n"
                f"        for (idx_t j = 0; j < {n}LL; ++j) out[bo + j * {so}LL] = {oc.save(f'{exp}({x} - m) / s')};")
        return make_kernel("softmax", params, grid_stride(body, n_rows), n_rows, span=_span(src))
    body = (f"        const idx_t o = row;\n{head}\n        {t} m = {ct.literal(-np.inf)}, s = 0;\n"
            f"        for (idx_t j = threadIdx.x; j < {n}LL; j += blockDim.x) {{ const {t} v = {x}; "
            f"m = {_max_expr('m', 'v')}; }}\n"
            f"        m = einsat_block_max(m, smem);\n"
            f"        for (idx_t j = threadIdx.x; j < {n}LL; j += blockDim.x) s += {exp}({x} - m);\n"
            f"        s = einsat_block_sum(s, smem);\n"
            f"        for (idx_t j = threadIdx.x; j < {n}LL; j += blockDim.x) "
            f"out[bo + j * {so}LL] = {oc.save(f'{exp}({x} - m) / s')};")
    body = f"    __shared__ {t} smem[32];\n" + block_rows(body, n_rows)
    return make_kernel("softmax", params, body, n_rows, block=_block_size(n), per_block=1, span=_span(src))


@memoize
def layernorm_kernel(src: Operand, scale: Operand, bias: Operand | None, axis: int, epsilon: float,
                     serial_max: int = SERIAL_MAX) -> Kernel:
    """ONNX LayerNormalization: normalize over dims [axis, rank), then * scale + bias."""
    ct = ctype(src.dtype)
    if not ct.is_float:
        raise ExecutionError(f"layernorm needs a float input, got {src.dtype}")
    norm_shape = src.shape[axis:]
    n = numel(norm_shape)
    ostr = contiguous_strides(src.shape)
    ks, (kin, kout) = coalesce(src.shape[:axis], [src.strides[:axis], ostr[:axis]])
    sst = broadcast_strides(scale.shape, scale.strides, norm_shape)
    bst = broadcast_strides(bias.shape, bias.strides, norm_shape) if bias is not None else None
    rs, rstrides = coalesce(norm_shape, [src.strides[axis:], ostr[axis:], sst] + ([bst] if bst else []))
    xin, xout, sc = rstrides[0], rstrides[1], rstrides[2]
    q = [f"q{j}" for j in range(len(rs))]
    kc = [f"k{j}" for j in range(len(ks))]
    t = ct.compute
    dec = decompose("j", rs, "q", "            ")
    x = ct.load(f"in0[bi + {dot(q, xin)}]")
    yv = f"(v - mean) / {ct.fn('sqrt')}(var + {ct.literal(epsilon)}) * {ct.load(f'scale[{dot(q, sc)}]')}"
    if bst is not None:
        yv += f" + {ct.load(f'bias[{dot(q, rstrides[3])}]')}"
    head = f"{decompose('o', ks, 'k')}\n        const idx_t bi = {dot(kc, kin)}, bo = {dot(kc, kout)};"
    serial = n <= serial_max
    lo, step = ("0", "1") if serial else ("threadIdx.x", "blockDim.x")
    loop = f"for (idx_t j = {lo}; j < {n}LL; j += {step})"
    red_s = "" if serial else "smem"
    body = (f"        const idx_t o = {'i' if serial else 'row'};\n{head}\n        {t} mean = 0, var = 0;\n"
            f"        {loop} {{\n{dec}\n            mean += {x};\n        }}\n"
            + ("" if serial else f"        mean = einsat_block_sum(mean, {red_s});\n")
            + f"        mean /= ({t}){max(n, 1)};\n"
            f"        {loop} {{\n{dec}\n            const {t} d = {x} - mean; var += d * d;\n        }}\n"
            + ("" if serial else f"        var = einsat_block_sum(var, {red_s});\n")
            + f"        var /= ({t}){max(n, 1)};\n"
            f"        {loop} {{\n{dec}\n            const {t} v = {x};\n"
            f"            out[bo + {dot(q, xout)}] = {ct.save(yv)};\n        }}")
    params = [Param("in0", "in", src.dtype), Param("scale", "in", scale.dtype)]
    if bias is not None:
        params.append(Param("bias", "in", bias.dtype))
    params.append(Param("out", "out", src.dtype))
    n_rows = numel(ks)
    if serial:
        return make_kernel("layernorm", params, grid_stride(body, n_rows), n_rows, span=_span(src, scale, bias))
    body = f"    __shared__ {t} smem[32];\n" + block_rows(body, n_rows)
    return make_kernel("layernorm", params, body, n_rows, block=_block_size(n), per_block=1,
                       span=_span(src, scale, bias))


@memoize
def pool_kernel(src: Operand, out_shape: Sequence[int], kind: str, kernel: Sequence[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], count_include_pad: bool = False) -> Kernel:
    """Max or average pooling over [N, C, *spatial], one thread per output element.

    Windows start at o*stride - pad_begin. Max ignores positions outside the input; average
    divides by the number of positions inside the input, or (count_include_pad) inside the
    padded input [-pad_begin, n + pad_end).
    """
    if kind not in ("max", "avg"):
        raise ExecutionError(f"unknown pooling {kind!r}")
    nsp = len(kernel)
    ct = ctype(src.dtype)
    t = ct.compute if kind == "max" else ct.acc
    sp_in = src.shape[2:]
    c = [f"c{k}" for k in range(2 + nsp)]
    lines = [decompose("i", out_shape), f"        const idx_t base = {dot(c[:2], src.strides[:2])};",
             f"        {t} acc = {ct.lowest() if kind == 'max' else '0'}; idx_t cnt = 0, cnt_pad = 0;"]
    indent = "        "
    for k in range(nsp):
        pb, pe = padding[k], padding[nsp + k]
        lines.append(f"{indent}for (int w{k} = 0; w{k} < {kernel[k]}; ++w{k}) {{")
        indent += "  "
        lines.append(f"{indent}const idx_t h{k} = c{k + 2} * {stride[k]}LL - {pb}LL + w{k} * {dilation[k]}LL;")
        lines.append(f"{indent}if (h{k} >= {sp_in[k] + pe}LL) continue;")
    lines.append(f"{indent}++cnt_pad;")
    inside = " || ".join(f"h{k} < 0 || h{k} >= {sp_in[k]}LL" for k in range(nsp))
    lines.append(f"{indent}if ({inside}) continue;")
    hs = [f"h{k}" for k in range(nsp)]
    lines.append(f"{indent}const {t} v = ({t}){ct.load(f'in0[base + {dot(hs, src.strides[2:])}]')};")
    lines.append(f"{indent}{'acc = ' + _max_expr('acc', 'v') if kind == 'max' else 'acc += v'}; ++cnt;")
    for k in range(nsp):
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    if kind == "avg":
        div = "cnt_pad" if count_include_pad else "cnt"
        lines.append(f"        out[i] = {ct.save(f'{div} ? acc / ({t}){div} : ({t})0')};")
    else:
        lines.append(f"        out[i] = {ct.save('acc')};")
    work = numel(out_shape)
    params = [Param("in0", "in", src.dtype), Param("out", "out", src.dtype)]
    return make_kernel(f"{kind}pool", params, grid_stride("\n".join(lines), work), work, span=_span(src))


@memoize
def lrn_kernel(src: Operand, size: int, alpha: float, beta: float, bias: float) -> Kernel:
    """ONNX LRN, one thread per element: its channel window's squares summed in NumPy's order
    (lowest channel first), then x / (bias + alpha / size * sum) ** beta."""
    ct = ctype(src.dtype)
    if not ct.is_float:
        raise ExecutionError(f"lrn needs a float input, got {src.dtype}")
    channels, lo, hi = src.shape[1], (size - 1) // 2, -(-(size - 1) // 2)
    c = [f"c{k}" for k in range(len(src.shape))]
    base = dot(["c0", *c[2:]], [src.strides[0], *src.strides[2:]])
    x = ct.load(f"in0[{base} + q * {src.strides[1]}LL]")
    value = f"{x} / {ct.fn('pow')}({ct.literal(bias)} + {ct.literal(alpha / size)} * s, {ct.literal(beta)})"
    body = (f"{decompose('i', src.shape)}\n        {ct.compute} s = 0;\n"
            f"        for (idx_t q = c1 - {lo}LL; q <= c1 + {hi}LL; ++q) {{\n"
            f"            if (q >= 0 && q < {channels}LL) {{ const {ct.compute} v = {x}; s += v * v; }}\n        }}\n"
            f"        {{ const idx_t q = c1; out[i] = {ct.save(value)}; }}")
    work = numel(src.shape)
    params = [Param("in0", "in", src.dtype), Param("out", "out", src.dtype)]
    return make_kernel("lrn", params, grid_stride(body, work), work, span=max(_span(src), work))


@memoize
def cumsum_kernel(src: Operand, axis: int, exclusive: bool, reverse: bool) -> Kernel:
    """Running sums along `axis` (ONNX CumSum) into a contiguous output, one thread per row,
    in the order NumPy adds them."""
    n = src.shape[axis]
    ct = ctype(src.dtype)
    ostrides = contiguous_strides(src.shape)
    kept = [k for k in range(len(src.shape)) if k != axis]
    kc = [f"k{j}" for j in range(len(kept))]
    order = f"idx_t j = {n - 1}LL; j >= 0; --j" if reverse else f"idx_t j = 0; j < {n}LL; ++j"
    x, dst = ct.load(f"in0[base + j * {src.strides[axis]}LL]"), f"out[obase + j * {ostrides[axis]}LL]"
    step = f"{dst} = {ct.save('acc')}; acc += {x};" if exclusive else f"acc += {x}; {dst} = {ct.save('acc')};"
    body = (f"{decompose('i', [src.shape[k] for k in kept], 'k')}\n"
            f"        const idx_t base = {dot(kc, [src.strides[k] for k in kept])};\n"
            f"        const idx_t obase = {dot(kc, [ostrides[k] for k in kept])};\n"
            f"        {ct.compute} acc = {ct.literal(0)};\n"
            f"        for ({order}) {{ {step} }}")
    work = numel([src.shape[k] for k in kept])
    params = [Param("in0", "in", src.dtype), Param("out", "out", src.dtype)]
    return make_kernel("cumsum", params, grid_stride(body, work), work, span=max(_span(src), numel(src.shape)))


@memoize
def argmax_kernel(src: Operand, axis: int) -> Kernel:
    """out[kept...] = the first index of the maximum along `axis` (a NaN counts as the
    maximum, as in NumPy), int64, one thread per row."""
    n = src.shape[axis]
    if n == 0:
        raise ExecutionError(f"argmax over an empty axis {axis} of {list(src.shape)}")
    ct = ctype(src.dtype)
    kept = [k for k in range(len(src.shape)) if k != axis]
    ks, (kst,) = coalesce([src.shape[k] for k in kept], [[src.strides[k] for k in kept]])
    kc = [f"k{j}" for j in range(len(ks))]
    x = ct.load(f"in0[base + j * {src.strides[axis]}LL]")
    body = (f"{decompose('i', ks, 'k')}\n        const idx_t base = {dot(kc, kst)};\n"
            f"        {ct.compute} best = {ct.load('in0[base]')}; long long at = 0;\n"
            f"        for (idx_t j = 1; j < {n}LL && best == best; ++j) {{\n"
            f"            const {ct.compute} v = {x};\n"
            f"            if (v > best || v != v) {{ best = v; at = j; }}\n        }}\n"
            f"        out[i] = at;")
    work = numel(ks)
    params = [Param("in0", "in", src.dtype), Param("out", "out", np.dtype(np.int64))]
    return make_kernel("argmax", params, grid_stride(body, work), work, span=_span(src))


@memoize
def matmul_kernel(a: Operand, b: Operand, out_shape: Sequence[int]) -> Kernel:
    """A plain batched matrix product for dtypes cuBLAS lacks (integers): one thread per output.

    `a` is [*batch, M, K] and `b` [*batch, K, N], both already broadcast to the output's batch
    dims (zero strides where broadcast); out is [*batch, M, N] contiguous.
    """
    if a.shape[-1] != b.shape[-2]:
        raise ExecutionError(f"matmul: {list(a.shape)} @ {list(b.shape)} do not contract")
    k = a.shape[-1]
    ct = ctype(a.dtype)
    r = len(out_shape)
    c = [f"c{j}" for j in range(r)]
    a_off = dot(c[:-1], a.strides[:-1])
    b_off = dot(c[:-2] + [c[-1]], b.strides[:-2] + b.strides[-1:])
    lines = [decompose("i", out_shape),
             f"        const idx_t ao = {a_off}, bo = {b_off};",
             f"        {ct.acc} acc = 0;",
             f"        for (idx_t q = 0; q < {k}LL; ++q) acc += ({ct.acc}){ct.load(f'in0[ao + q * {a.strides[-1]}LL]')}"
             f" * ({ct.acc}){ct.load(f'in1[bo + q * {b.strides[-2]}LL]')};",
             f"        out[i] = {ct.save('acc')};"]
    work = numel(out_shape)
    params = [Param("in0", "in", a.dtype), Param("in1", "in", b.dtype), Param("out", "out", a.dtype)]
    return make_kernel("matmul", params, grid_stride("\n".join(lines), work), work)
