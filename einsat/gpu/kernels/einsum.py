"""The einsum kernel: one thread per output element, a loop nest over the summed labels.

Every dim of every input carries one label (`einsat.ir.ops.einsum.einsum_labels`); a thread
fixes the output's labels, loops over the others and sums the products of the inputs read
through their strides (a broadcast '...' dim of size 1 reads with stride 0, a label repeated
in one input walks its diagonal). Products are summed in the accumulator type.
"""

from __future__ import annotations

from typing import Sequence

from einsat.gpu.kernels.codegen import Kernel, Param, ctype, decompose, extent, grid_stride, make_kernel, memoize, numel
from einsat.gpu.kernels.elementwise import Operand


@memoize
def einsum_kernel(inputs: Sequence[Operand], labels: Sequence[str], out_labels: str,
                  sizes: tuple[tuple[str, int], ...]) -> Kernel:
    size = dict(sizes)
    ct = ctype(inputs[0].dtype)
    out_shape = tuple(size[c] for c in out_labels)
    var = {c: f"o{k}" for k, c in enumerate(out_labels)}
    summed = sorted(set("".join(labels)) - set(out_labels))
    var.update((c, f"s{k}") for k, c in enumerate(summed))
    reads = []
    for k, (op, term) in enumerate(zip(inputs, labels)):
        terms = [f"{var[c]} * {st}LL" for c, d, st in zip(term, op.shape, op.strides) if d != 1 and st != 0]
        reads.append(ct.load(f"in{k}[{' + '.join(terms) or '0'}]"))
    product = " * ".join(f"({ct.acc})({r})" for r in reads)
    lines = [decompose("i", out_shape, "o"), f"        {ct.acc} acc = 0;"]
    lines += [f"        for (idx_t {var[c]} = 0; {var[c]} < {size[c]}LL; ++{var[c]})" for c in summed]
    lines += [f"        acc += {product};", f"        out[i] = {ct.save('acc')};"]
    work = numel(out_shape)
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + [Param("out", "out", ct.dtype)]
    span = max([extent(op.shape, op.strides) for op in inputs] + [work])
    return make_kernel("einsum", params, grid_stride("\n".join(x for x in lines if x), work), work, span=span)
