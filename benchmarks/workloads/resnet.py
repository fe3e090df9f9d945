"""Residual networks: ResNet-18 (PET §8, EinNet §7) and ResNeXt-50 (TASO, Tensat).

ResNet-18 is torchvision's: conv-batchnorm-ReLU, basic blocks [2, 2, 2, 2], global average pool,
a 1000-way classifier. ResNeXt-50 is TASO's `examples/resnext50.py`: convs with a fused ReLU and
no batchnorm, bottleneck blocks [3, 4, 6, 3] with 32-group 3×3 convs, no classifier.
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph


def basic_block(net: Net, x, out_ch: int, stride: int):
    """conv3×3-bn-relu → conv3×3-bn, plus the (projected) input, then relu."""
    y = net.conv(x, out_ch, 3, stride=stride, padding=1, bn=True)
    y = net.conv(y, out_ch, 3, padding=1, bn=True, act=None, gamma=0.5)
    if stride != 1 or x.shape[1] != out_ch:
        x = net.conv(x, out_ch, 1, stride=stride, bn=True, act=None)
    return net.b.relu(net.b.add(y, x))


def resnet18(batch: int = 1, image: int = 224, classes: int = 1000) -> Graph:
    net = Net("resnet18")
    x = net.b.input("x", (batch, 3, image, image))
    t = net.conv(x, 64, 7, stride=2, padding=3, bn=True)
    t = net.maxpool(t, 3, 2, padding=1)
    for stage, ch in enumerate((64, 128, 256, 512)):
        for k in range(2):
            t = basic_block(net, t, ch, 2 if stage > 0 and k == 0 else 1)
    return net.build(net.classifier(t, classes))


def resnext_block(net: Net, x, stride: int, out_ch: int, groups: int):
    """TASO's block: 1×1 → grouped 3×3 (stride) → 1×1 to 2·out_ch, plus the (projected) input."""
    t = net.conv_same(x, out_ch, 1)
    t = net.conv_same(t, out_ch, 3, stride=stride, groups=groups)
    t = net.conv_same(t, 2 * out_ch, 1, act=None)
    if stride > 1 or x.shape[1] != 2 * out_ch:
        x = net.conv_same(x, 2 * out_ch, 1, stride=stride)
    return net.b.relu(net.b.add(x, t))


def resnext50(batch: int = 1, image: int = 224, blocks=(3, 4, 6, 3), groups: int = 32) -> Graph:
    net = Net("resnext50")
    x = net.b.input("x", (batch, 3, image, image))
    t = net.conv_same(x, 64, 7, stride=2)
    t = net.pool_same(t, "max", 3, 2)
    for stage, (n, ch) in enumerate(zip(blocks, (128, 256, 512, 1024))):
        for k in range(n):
            t = resnext_block(net, t, 2 if stage > 0 and k == 0 else 1, ch, groups)
    return net.build(t)
