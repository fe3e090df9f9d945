"""The layers the workloads share, written once on top of `einsat.GraphBuilder`.

`Net` wraps a builder and a seeded generator, so that a workload built twice with the same
arguments has the same weights. Weights are scaled so that activations stay of order one
through deep stacks (He scaling before a ReLU, batchnorm statistics near the identity), which
keeps numeric comparisons meaningful at every depth. Layouts are ONNX's: NCHW activations,
[F, C/groups, kh, kw] conv weights; dense weights are stored [in, out].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from einsat import GraphBuilder
from einsat.ir.builder import Tensor


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow/TASO "SAME" padding of one dim: (begin, end), the extra one at the end."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - size)
    return total // 2, total - total // 2


class Net:
    """A builder plus a generator: `net.conv(x, 64, 3, padding=1)`, `net.dense(x, 1000)`, ..."""

    def __init__(self, name: str, seed: int = 0):
        self.b = GraphBuilder(name, seed=seed)
        self.rng = np.random.default_rng(seed + 1)

    # -- weights -------------------------------------------------------------------------------
    def normal(self, shape, std: float) -> Tensor:
        w = self.rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(std)
        return self.b.weight(None, w)

    def conv_weight(self, out_ch: int, in_ch: int, kernel, gain: float = 2.0) -> Tensor:
        kh, kw = pair(kernel)
        return self.normal((out_ch, in_ch, kh, kw), np.sqrt(gain / (in_ch * kh * kw)))

    def batchnorm_params(self, ch: int, gamma: float = 1.0) -> list[Tensor]:
        rng = self.rng
        scale = gamma * (1 + 0.1 * rng.standard_normal(ch))
        bias = 0.1 * rng.standard_normal(ch)
        mean = 0.1 * rng.standard_normal(ch)
        var = 1 + 0.2 * rng.random(ch)
        return [self.b.weight(None, v.astype(np.float32)) for v in (scale, bias, mean, var)]

    # -- layers --------------------------------------------------------------------------------
    def conv(self, x: Tensor, out_ch: int, kernel, stride=1, padding=0, dilation=1, groups: int = 1,
             bias: bool = False, bn: bool = False, act: str | None = "relu", gamma: float = 1.0,
             bn_epsilon: float = 1e-5) -> Tensor:
        """conv → (batchnorm) → (activation). `padding` is an int, (ph, pw) or ONNX pads."""
        gain = 2.0 if act == "relu" else 1.0
        w = self.conv_weight(out_ch, x.shape[1] // groups, kernel, gain)
        extra = [self.normal((out_ch,), 0.1)] if bias else []
        y = self.b.conv(x, w, *extra, stride=stride, padding=padding, dilation=dilation, groups=groups)
        if bn:
            y = self.b.batchnorm(y, *self.batchnorm_params(out_ch, gamma), epsilon=bn_epsilon)
        return self.act(y, act)

    def conv_same(self, x: Tensor, out_ch: int, kernel, stride=1, groups: int = 1,
                  act: str | None = "relu") -> Tensor:
        """A conv with TensorFlow "SAME" padding (TASO's models)."""
        kh, kw = pair(kernel)
        sh, sw = pair(stride)
        (t, bottom), (left, right) = (same_padding(x.shape[2], kh, sh), same_padding(x.shape[3], kw, sw))
        return self.conv(x, out_ch, (kh, kw), stride=(sh, sw), padding=(t, left, bottom, right),
                         groups=groups, act=act)

    def conv_transpose(self, x: Tensor, out_ch: int, kernel, stride=1, padding=0, output_padding=0,
                       act: str | None = "relu") -> Tensor:
        kh, kw = pair(kernel)
        c = x.shape[1]
        w = self.normal((c, out_ch, kh, kw), np.sqrt(2.0 / (c * kh * kw / max(1, np.prod(pair(stride))))))
        y = self.b.conv_transpose(x, w, stride=stride, padding=padding, output_padding=output_padding)
        return self.act(y, act)

    def act(self, y: Tensor, act: str | None) -> Tensor:
        if act is None:
            return y
        return getattr(self.b, act)(y)

    def maxpool(self, x: Tensor, kernel, stride=None, padding=0) -> Tensor:
        return self.b.maxpool(x, kernel=pair(kernel), stride=pair(stride or kernel), padding=padding)

    def avgpool(self, x: Tensor, kernel, stride=None, padding=0) -> Tensor:
        return self.b.avgpool(x, kernel=pair(kernel), stride=pair(stride or kernel), padding=padding)

    def pool_same(self, x: Tensor, kind: str, kernel: int, stride: int) -> Tensor:
        """TensorFlow "SAME" pooling (padding excluded from averages, -inf for max)."""
        t, bottom = same_padding(x.shape[2], kernel, stride)
        left, right = same_padding(x.shape[3], kernel, stride)
        pool = self.maxpool if kind == "max" else self.avgpool
        return pool(x, kernel, stride, padding=(t, left, bottom, right))

    def classifier(self, x: Tensor, classes: int) -> Tensor:
        """global average pool → flatten → fully connected."""
        return self.dense2d(self.b.flatten(self.b.global_avgpool(x), axis=1), classes)

    def dense2d(self, x: Tensor, out: int, act: str | None = None) -> Tensor:
        """[N, in] → gemm with a bias → [N, out]."""
        fan_in = x.shape[-1]
        w = self.normal((fan_in, out), np.sqrt((2.0 if act == "relu" else 1.0) / fan_in))
        return self.act(self.b.gemm(x, w, self.normal((out,), 0.1)), act)

    def linear(self, x: Tensor, out: int, bias: bool = True, act: str | None = None) -> Tensor:
        """[..., in] @ [in, out] (+ bias): a matmul, then a broadcast add."""
        fan_in = x.shape[-1]
        y = self.b.matmul(x, self.normal((fan_in, out), np.sqrt((2.0 if act == "relu" else 1.0) / fan_in)))
        if bias:
            y = self.b.add(y, self.normal((out,), 0.1))
        return self.act(y, act)

    def layernorm(self, x: Tensor) -> Tensor:
        h = x.shape[-1]
        scale = self.b.weight(None, (1 + 0.1 * self.rng.standard_normal(h)).astype(np.float32))
        return self.b.layernorm(x, scale, self.normal((h,), 0.1), axis=-1, epsilon=1e-5)

    def concat(self, xs: Sequence[Tensor], axis: int = 1) -> Tensor:
        return self.b.concat(*xs, axis=axis)

    def build(self, *outputs: Tensor):
        return self.b.build(*outputs)
