"""NasNet-A as TASO (`examples/nasnet_a.py`) and Tensat evaluate it.

Input [N, 128, 56, 56]; three stacks of five normal cells, each stack followed by a reduction
cell; channels double per stack. Convs carry a fused ReLU where TASO's do; a separable conv is
TASO's pair: a grouped k×k conv with `out_channels` groups, then a 1×1 conv. Padding is
TensorFlow's "SAME" (pooling averages exclude the padding).
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph


def squeeze(net: Net, x, out_ch: int):
    return net.conv_same(x, out_ch, 1)


def fit(net: Net, current, x):
    if x.shape[2] == current.shape[2]:
        return squeeze(net, x, current.shape[1])
    return net.conv_same(x, current.shape[1], 3, stride=2)


def separable(net: Net, x, out_ch: int, kernel: int, stride: int = 1, act=None):
    t = net.conv_same(x, out_ch, kernel, stride=stride, groups=out_ch, act=None)
    return net.conv_same(t, out_ch, 1, act=act)


def normal_cell(net: Net, prev, cur, out_ch: int):
    cur = squeeze(net, cur, out_ch)
    prev = fit(net, cur, prev)
    avg = lambda x: net.pool_same(x, "avg", 3, 1)  # noqa: E731
    ts = [separable(net, cur, out_ch, 3), cur,
          separable(net, prev, out_ch, 3), separable(net, cur, out_ch, 3),
          avg(cur), prev,
          avg(prev), avg(prev),
          separable(net, prev, out_ch, 3), separable(net, prev, out_ch, 3)]
    return net.concat([net.b.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)])


def reduction_cell(net: Net, prev, cur, out_ch: int):
    cur = squeeze(net, cur, out_ch)
    prev = fit(net, cur, prev)
    add = net.b.add
    o0 = add(separable(net, prev, out_ch, 7, 2), separable(net, cur, out_ch, 5, 2))
    o1 = add(net.pool_same(cur, "max", 3, 2), separable(net, prev, out_ch, 7, 2))
    o2 = add(net.pool_same(cur, "avg", 3, 2), separable(net, prev, out_ch, 5, 2))
    o3 = add(net.pool_same(cur, "max", 3, 2), separable(net, o0, out_ch, 3))
    o4 = add(net.pool_same(o0, "avg", 3, 1), o1)
    return net.concat([o0, o1, o2, o3, o4])


def nasnet_a(batch: int = 1, size: int = 56, channels: int = 128, cells: int = 5, stacks: int = 3) -> Graph:
    net = Net("nasnet_a")
    x = net.b.input("x", (batch, 128, size, size))
    t = net.maxpool(x, 1, 1)  # TASO starts with a 1×1 max pool (an identity)
    out_ch = channels
    for _ in range(stacks):
        prev = cur = t
        for _ in range(cells):
            prev, cur = cur, normal_cell(net, prev, cur, out_ch)
        out_ch *= 2
        t = reduction_cell(net, prev, cur, out_ch)
    return net.build(t)
