"""NasRNN as TASO (`examples/nasrnn.py`) and Tensat evaluate it: 5 steps, hidden size 512.

Each step combines the input x_t and the state h: eight `x·W + h·U` products feed a fixed tree
of ReLU, sigmoid and tanh gates joined by adds and multiplies; the initial state is a weight.
"""

from __future__ import annotations

import numpy as np

from benchmarks.workloads.layers import Net
from einsat import Graph


def nas_node(net: Net, state, x):
    b = net.b
    h = state.shape[1]

    def combine():
        w1 = net.normal((x.shape[1], h), 1 / np.sqrt(x.shape[1]))
        w2 = net.normal((h, h), 1 / np.sqrt(h))
        return b.add(b.matmul(x, w1), b.matmul(state, w2))

    t = [combine() for _ in range(8)]
    m = [b.add(b.relu(t[0]), b.sigmoid(t[3])),
         b.add(b.sigmoid(t[1]), b.tanh(t[2])),
         b.mul(b.sigmoid(t[4]), b.tanh(t[5])),
         b.mul(b.sigmoid(t[6]), b.relu(t[7]))]
    m.append(b.add(b.sigmoid(m[1]), b.tanh(m[2])))
    m.append(b.mul(b.tanh(m[0]), b.tanh(m[3])))
    m.append(b.mul(b.tanh(m[4]), b.tanh(m[5])))
    return b.tanh(m[6])


def nasrnn(batch: int = 1, steps: int = 5, hidden: int = 512) -> Graph:
    net = Net("nasrnn")
    xs = [net.b.input(f"x{t}", (batch, hidden)) for t in range(steps)]
    state = net.normal((batch, hidden), 1.0)
    for x in xs:
        state = nas_node(net, state, x)
    return net.build(state)
