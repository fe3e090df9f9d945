"""Band matrix products (EinNet's G2BMM and GBMM) as generated kernels.

    g2bmm(a, b)[z, i, j] = Σ_k a[z, i, k] · b[z, i + D·(j − W), k]     j < 2W+1
    gbmm(p, v)[z, i, n]  = Σ_j p[z, i, j] · v[z, i + D·(j − W), n]

Rows outside [0, M) contribute zero. Both run one block per row (z, i): the row of `a` (or
`p`) is staged in shared memory once, then g2bmm gives each warp one band position j (the
warp's lanes split k, reading b's row coalesced, and combine with a shuffle), and gbmm gives
each thread output columns n (reading v's rows coalesced across threads).
"""

from __future__ import annotations

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import Kernel, Param, block_rows, ctype, make_kernel, memoize
from einsat.gpu.kernels.elementwise import Operand

SHARED_ELEMS = 4096  # rows longer than this are read from global memory instead


def _row(name: str, n: int, off: str, stride: int, t: str, load) -> tuple[str, str]:
    """(declaration, staging code) for one row of n elements in shared memory, and the C
    expression reading element `q` of it."""
    if n > SHARED_ELEMS:
        return "", ""
    decl = f"    __shared__ {t} {name}_s[{max(n, 1)}];\n"
    elem = load(f"{off} + q * {stride}LL")
    stage = (f"        __syncthreads();\n"
             f"        for (idx_t q = threadIdx.x; q < {n}LL; q += blockDim.x) {name}_s[q] = {elem};\n"
             f"        __syncthreads();")
    return decl, stage


@memoize
def g2bmm_kernel(a: Operand, b: Operand, width: int, dilation: int) -> Kernel:
    z, m, k = a.shape
    if tuple(b.shape) != (z, m, k):
        raise ExecutionError(f"g2bmm: a {list(a.shape)} and b {list(b.shape)} differ")
    ct = ctype(a.dtype)
    t = ct.acc
    j_len = 2 * width + 1
    a_off = f"zz * {a.strides[0]}LL + ii * {a.strides[1]}LL"
    decl, stage = _row("arow", k, a_off, a.strides[2], t, lambda e: f"({t}){ct.load(f'in0[{e}]')}")
    a_elem = "arow_s[q]" if decl else f"({t}){ct.load(f'in0[{a_off} + q * {a.strides[2]}LL]')}"
    body = f"""        const idx_t zz = row / {m}LL, ii = row % {m}LL;
{stage}
        const int lane = threadIdx.x % EINSAT_WARP, warp = threadIdx.x / EINSAT_WARP;
        const int nw = blockDim.x / EINSAT_WARP;
        for (idx_t j = warp; j < {j_len}LL; j += nw) {{
            const idx_t r = ii + {dilation}LL * (j - {width}LL);
            {t} acc = 0;
            if (r >= 0 && r < {m}LL) {{
                const idx_t bo = zz * {b.strides[0]}LL + r * {b.strides[1]}LL;
                for (idx_t q = lane; q < {k}LL; q += EINSAT_WARP)
                    acc += {a_elem} * ({t}){ct.load(f'in1[bo + q * {b.strides[2]}LL]')};
            }}
            acc = einsat_warp_sum(acc);
            if (lane == 0) out[row * {j_len}LL + j] = {ct.save('acc')};
        }}"""
    params = [Param("in0", "in", a.dtype), Param("in1", "in", b.dtype), Param("out", "out", a.dtype)]
    return make_kernel("g2bmm", params, decl + block_rows(body, z * m), z * m, block=128, per_block=1)


@memoize
def gbmm_kernel(p: Operand, v: Operand, dilation: int) -> Kernel:
    z, m, j_len = p.shape
    n = v.shape[2]
    if tuple(v.shape[:2]) != (z, m) or j_len % 2 == 0:
        raise ExecutionError(f"gbmm: p {list(p.shape)} and v {list(v.shape)} do not fit")
    width = (j_len - 1) // 2
    ct = ctype(p.dtype)
    t = ct.acc
    p_off = f"zz * {p.strides[0]}LL + ii * {p.strides[1]}LL"
    decl, stage = _row("prow", j_len, p_off, p.strides[2], t, lambda e: f"({t}){ct.load(f'in0[{e}]')}")
    p_elem = "prow_s[j]" if decl else f"({t}){ct.load(f'in0[{p_off} + j * {p.strides[2]}LL]')}"
    v_elem = f"({t}){ct.load(f'in1[zz * {v.strides[0]}LL + r * {v.strides[1]}LL + c * {v.strides[2]}LL]')}"
    body = f"""        const idx_t zz = row / {m}LL, ii = row % {m}LL;
{stage}
        for (idx_t c = threadIdx.x; c < {n}LL; c += blockDim.x) {{
            {t} acc = 0;
            for (idx_t j = 0; j < {j_len}LL; ++j) {{
                const idx_t r = ii + {dilation}LL * (j - {width}LL);
                if (r < 0 || r >= {m}LL) continue;
                acc += {p_elem} * {v_elem};
            }}
            out[row * {n}LL + c] = {ct.save('acc')};
        }}"""
    block = 128 if n >= 128 else 64 if n >= 64 else 32
    params = [Param("in0", "in", p.dtype), Param("in1", "in", v.dtype), Param("out", "out", p.dtype)]
    return make_kernel("gbmm", params, decl + block_rows(body, z * m), z * m, block=block, per_block=1)
