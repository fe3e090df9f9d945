"""The single-operator cases of PET Table 3 and EinNet Table 3, with the papers' shapes.

PET Table 3 (§8.3-8.4): conv [1, 48, 38, 38] * [64, 48, 5, 5] (Inception-v3's 5×5 branch,
padding 2); dilated conv [1, 512, 14, 14] * [256, 512, 3, 3], dilation 2 (CSRNet, padding 2);
group conv: two convs [1, 768, 18, 18] * [192, 768, 1, 1] and [1, 768, 18, 18] * [160, 768, 1, 1]
(Inception-v3, Figure 10); batch matmul: three [512, 768] @ [768, 768] products of one input
(BERT's Q, K, V).

EinNet Table 3 (§7.3; shapes completed from the EinNet artifact's `1_op` scripts): Conv3x3
[1, 512, 7, 7] * [512, 512, 3, 3], padding 1 (ResNet-18); ConvTranspose [16, 448, 2, 2] *
[448, 256, 4, 4], stride 2, padding 1 (InfoGAN); Conv5x5 [16, 32, 224, 224] * [1, 32, 5, 5],
padding 2 (SRCNN); G2BMM [8, 10000, 64] × [8, 10000, 64], width 1000, dilation 4 (Longformer).
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph


def single_conv(name: str, batch: int, channels: int, size: int, out_ch: int, kernel: int,
                padding: int, dilation: int = 1) -> Graph:
    net = Net(name)
    x = net.b.input("x", (batch, channels, size, size))
    return net.build(net.conv(x, out_ch, kernel, padding=padding, dilation=dilation, act=None))


def pet_conv(batch: int = 1, size: int = 38) -> Graph:
    return single_conv("pet_conv", batch, 48, size, 64, 5, padding=2)


def pet_dilated_conv(batch: int = 1, size: int = 14) -> Graph:
    return single_conv("pet_dilated_conv", batch, 512, size, 256, 3, padding=2, dilation=2)


def pet_group_conv(batch: int = 1, size: int = 18) -> Graph:
    net = Net("pet_group_conv")
    x1, x2 = (net.b.input(n, (batch, 768, size, size)) for n in ("x1", "x2"))
    return net.build(net.conv(x1, 192, 1, act=None), net.conv(x2, 160, 1, act=None))


def pet_batch_matmul(batch: int = 1, rows: int = 512, hidden: int = 768) -> Graph:
    """`batch` stacks sequences along the rows ([batch·512, 768])."""
    net = Net("pet_batch_matmul")
    x = net.b.input("x", (batch * rows, hidden))
    return net.build(*(net.linear(x, hidden, bias=False) for _ in range(3)))


def einnet_conv3x3(batch: int = 1, size: int = 7) -> Graph:
    return single_conv("einnet_conv3x3", batch, 512, size, 512, 3, padding=1)


def einnet_conv_transpose(batch: int = 16, size: int = 2) -> Graph:
    net = Net("einnet_conv_transpose")
    x = net.b.input("x", (batch, 448, size, size))
    return net.build(net.conv_transpose(x, 256, 4, stride=2, padding=1, act=None))


def einnet_conv5x5(batch: int = 16, size: int = 224) -> Graph:
    return single_conv("einnet_conv5x5", batch, 32, size, 1, 5, padding=2)


def einnet_g2bmm(batch: int = 8, seq: int = 10000, dim: int = 64, width: int = 1000, dilation: int = 4) -> Graph:
    net = Net("einnet_g2bmm")
    q, k = (net.b.input(n, (batch, seq, dim)) for n in ("q", "k"))
    return net.build(net.b.g2bmm(q, k, width=width, dilation=dilation))
