"""Inception-v3 (PET §8, TASO, Tensat), as torchvision builds it for inference.

Every conv is conv (no bias) → batchnorm (ε = 1e-3) → ReLU; the modules are TASO's
`examples/inceptionv3.py` (A ×3, B, C ×4, D, E ×2 after the stem), followed by a global average
pool and a 1000-way classifier. The smallest input the stem accepts is 75×75.
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph


def cbr(net: Net, x, ch: int, kernel, stride=1, padding=0):
    return net.conv(x, ch, kernel, stride=stride, padding=padding, bn=True, bn_epsilon=1e-3)


def stem(net: Net, x):
    x = cbr(net, x, 32, 3, stride=2)
    x = cbr(net, x, 32, 3)
    x = cbr(net, x, 64, 3, padding=1)
    x = net.maxpool(x, 3, 2)
    x = cbr(net, x, 80, 1)
    x = cbr(net, x, 192, 3)
    return net.maxpool(x, 3, 2)


def avg_branch(net: Net, x, ch: int):
    return cbr(net, net.b.avgpool(x, kernel=(3, 3), stride=(1, 1), padding=1, count_include_pad=1), ch, 1)


def inception_a(net: Net, x, pool_features: int):
    b1 = cbr(net, x, 64, 1)
    b5 = cbr(net, cbr(net, x, 48, 1), 64, 5, padding=2)
    b3 = cbr(net, cbr(net, cbr(net, x, 64, 1), 96, 3, padding=1), 96, 3, padding=1)
    return net.concat([b1, b5, b3, avg_branch(net, x, pool_features)])


def inception_b(net: Net, x):
    b3 = cbr(net, x, 384, 3, stride=2)
    d = cbr(net, cbr(net, cbr(net, x, 64, 1), 96, 3, padding=1), 96, 3, stride=2)
    return net.concat([b3, d, net.maxpool(x, 3, 2)])


def inception_c(net: Net, x, c7: int):
    b1 = cbr(net, x, 192, 1)
    b7 = cbr(net, x, c7, 1)
    b7 = cbr(net, b7, c7, (1, 7), padding=(0, 3))
    b7 = cbr(net, b7, 192, (7, 1), padding=(3, 0))
    d = cbr(net, x, c7, 1)
    for ch, k, p in ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))):
        d = cbr(net, d, ch, k, padding=p)
    return net.concat([b1, b7, d, avg_branch(net, x, 192)])


def inception_d(net: Net, x):
    b3 = cbr(net, cbr(net, x, 192, 1), 320, 3, stride=2)
    b7 = cbr(net, x, 192, 1)
    b7 = cbr(net, b7, 192, (1, 7), padding=(0, 3))
    b7 = cbr(net, b7, 192, (7, 1), padding=(3, 0))
    b7 = cbr(net, b7, 192, 3, stride=2)
    return net.concat([b3, b7, net.maxpool(x, 3, 2)])


def inception_e(net: Net, x):
    b1 = cbr(net, x, 320, 1)
    b3 = cbr(net, x, 384, 1)
    b3a, b3b = cbr(net, b3, 384, (1, 3), padding=(0, 1)), cbr(net, b3, 384, (3, 1), padding=(1, 0))
    d = cbr(net, cbr(net, x, 448, 1), 384, 3, padding=1)
    da, db = cbr(net, d, 384, (1, 3), padding=(0, 1)), cbr(net, d, 384, (3, 1), padding=(1, 0))
    return net.concat([b1, b3a, b3b, da, db, avg_branch(net, x, 192)])


def inception_v3(batch: int = 1, image: int = 299, classes: int = 1000) -> Graph:
    net = Net("inception_v3")
    t = stem(net, net.b.input("x", (batch, 3, image, image)))
    for pool_features in (32, 64, 64):
        t = inception_a(net, t, pool_features)
    t = inception_b(net, t)
    for c7 in (128, 160, 160, 192):
        t = inception_c(net, t, c7)
    t = inception_d(net, t)
    t = inception_e(net, inception_e(net, t))
    return net.build(net.classifier(t, classes))
