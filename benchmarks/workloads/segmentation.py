"""GCN, the global convolutional network of "Large Kernel Matters" (EinNet §7, Figure 15).

The EinNet artifact's `gcn_1703_02719.py` with a ResNet-18 backbone (`use_resnet_gcn=False`,
`backbone="resnet18"`) and its deconvolution decoder (`use_deconv=True`, no bilinear resizing):
each backbone stage feeds a GCN block — two branches of spatially separable large-kernel convs,
k×1 then 1×k and 1×k then k×1 (k = 11), added — then a boundary-refinement block
(conv3×3-ReLU-conv3×3 plus the input); 3×3 stride-2 conv transposes upsample and merge the
stages back to the input resolution; a 1×1 conv gives the class scores.
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from benchmarks.workloads.resnet import basic_block
from einsat import Graph


def gcn_block(net: Net, x, classes: int, k: int):
    """(k×1 → 1×k) + (1×k → k×1): a k×k receptive field with 4·k taps per channel pair."""
    conv = lambda t, kernel, pad: net.conv(t, classes, kernel, padding=pad, bias=True, act=None)  # noqa: E731
    a = conv(conv(x, (k, 1), (k // 2, 0)), (1, k), (0, k // 2))
    b = conv(conv(x, (1, k), (0, k // 2)), (k, 1), (k // 2, 0))
    return net.b.add(a, b)


def br_block(net: Net, x):
    """Boundary refinement: x + conv3×3(relu(conv3×3(x)))."""
    ch = x.shape[1]
    t = net.conv(x, ch, 3, padding=1, bias=True)
    t = net.conv(t, ch, 3, padding=1, bias=True, act=None)
    return net.b.add(t, x)


def upsample(net: Net, x):
    return net.conv_transpose(x, x.shape[1], 3, stride=2, padding=1, output_padding=1, act=None)


def gcn(batch: int = 1, image: int = 224, classes: int = 21, kernel: int = 11) -> Graph:
    net = Net("gcn")
    b = net.b
    t = net.conv(b.input("x", (batch, 3, image, image)), 64, 7, stride=2, padding=3, bn=True)
    t = net.maxpool(t, 3, 2, padding=1)
    stages = []
    for stage, ch in enumerate((64, 128, 256, 512)):
        for j in range(2):
            t = basic_block(net, t, ch, 2 if stage > 0 and j == 0 else 1)
        stages.append(t)
    x1, x2, x3, x4 = (br_block(net, gcn_block(net, s, classes, kernel)) for s in stages)
    x4 = upsample(net, x4)
    x3 = upsample(net, br_block(net, b.add(x3, x4)))
    x2 = upsample(net, br_block(net, b.add(x2, x3)))
    x1 = upsample(net, br_block(net, b.add(x1, x2)))
    t = br_block(net, upsample(net, br_block(net, x1)))
    return net.build(net.conv(t, classes, 1, bias=True, act=None))
