"""EinNet's image generators (§7, InfiniTensor's `getGANGraph` / `getFSRCNNGraph`), in NCHW.

- `infogan`, `dcgan`: generators of five conv-transpose layers, ReLU between them and tanh at
  the end, no batchnorm (as EinNet builds them). InfoGAN: a [N, 228, 1, 1] code through
  448 (2×2 kernel), 256, 128, 64, 3 channels (4×4 kernels, stride 2, padding 1) to 32×32.
  DCGAN: a [N, 100, 1, 1] code through 512 (4×4), 256, 128, 64, 3 channels to 64×64.
- `fsrcnn`: FSRCNN on a [N, 1, 32, 32] image: 5×5 feature extraction (56), 1×1 shrinking (12),
  four 3×3 mapping convs (12), 1×1 expanding (56), ReLU where EinNet has PReLU, and EinNet's
  final 9×9 conv transpose (stride 1, padding 3) to [N, 1, 34, 34].
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph

# (out channels, kernel, stride, padding) per layer
INFOGAN = ((448, 2, 1, 0), (256, 4, 2, 1), (128, 4, 2, 1), (64, 4, 2, 1), (3, 4, 2, 1))
DCGAN = ((512, 4, 1, 0), (256, 4, 2, 1), (128, 4, 2, 1), (64, 4, 2, 1), (3, 4, 2, 1))


def generator(name: str, batch: int, code: int, layers) -> Graph:
    net = Net(name)
    t = net.b.input("z", (batch, code, 1, 1))
    for k, (ch, kernel, stride, pad) in enumerate(layers):
        act = "tanh" if k == len(layers) - 1 else "relu"
        t = net.conv_transpose(t, ch, kernel, stride=stride, padding=pad, act=act)
    return net.build(t)


def infogan(batch: int = 1, layers: int = 5) -> Graph:
    return generator("infogan", batch, 228, INFOGAN[:layers])


def dcgan(batch: int = 1, layers: int = 5) -> Graph:
    return generator("dcgan", batch, 100, DCGAN[:layers])


# (out channels, kernel, padding, relu) of the convs before the final conv transpose
FSRCNN = ((56, 5, 2, True), (12, 1, 0, True), (12, 3, 1, False), (12, 3, 1, False), (12, 3, 1, False),
          (12, 3, 1, True), (56, 1, 0, True))


def fsrcnn(batch: int = 1, size: int = 32) -> Graph:
    net = Net("fsrcnn")
    t = net.b.input("x", (batch, 1, size, size))
    for ch, kernel, pad, relu in FSRCNN:
        t = net.conv(t, ch, kernel, padding=pad, act="relu" if relu else None)
    return net.build(net.conv_transpose(t, 1, 9, stride=1, padding=3, act=None))
