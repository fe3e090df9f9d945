"""Plain convolution stacks: VGG-19 and SqueezeNet (Tensat), the CSRNet back end (PET, EinNet).

- VGG-19: torchvision's configuration E (16 3×3 convs with ReLU, 5 max pools) and its
  classifier (4096, 4096, classes; no dropout at inference).
- SqueezeNet 1.1: fire modules (1×1 squeeze, then 1×1 and 3×3 expand convs concatenated).
- CSRNet back end as PET and EinNet run it (EinNet's `csrnet.py`): six 3×3 convs with dilation 2
  and ReLU on [N, 512, 14, 14], channels 512, 512, 512, 256, 128, 64, no bias.
"""

from __future__ import annotations

from benchmarks.workloads.layers import Net
from einsat import Graph

VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M")


def vgg19(batch: int = 1, image: int = 224, classes: int = 1000, hidden: int = 4096) -> Graph:
    net = Net("vgg19")
    t = net.b.input("x", (batch, 3, image, image))
    for v in VGG19:
        t = net.maxpool(t, 2) if v == "M" else net.conv(t, v, 3, padding=1, bias=True)
    t = net.b.flatten(t, axis=1)
    t = net.dense2d(t, hidden, act="relu")
    t = net.dense2d(t, hidden, act="relu")
    return net.build(net.dense2d(t, classes))


def fire(net: Net, x, squeeze: int, expand: int):
    """squeeze 1×1 → (expand 1×1 ‖ expand 3×3), concatenated on channels."""
    s = net.conv(x, squeeze, 1, bias=True)
    return net.concat([net.conv(s, expand, 1, bias=True), net.conv(s, expand, 3, padding=1, bias=True)])


def squeezenet(batch: int = 1, image: int = 224, classes: int = 1000) -> Graph:
    net = Net("squeezenet")
    t = net.b.input("x", (batch, 3, image, image))
    t = net.conv(t, 64, 3, stride=2, bias=True)
    for stage in ([(16, 64), (16, 64)], [(32, 128), (32, 128)], [(48, 192), (48, 192), (64, 256), (64, 256)]):
        t = net.b.maxpool(t, kernel=(3, 3), stride=(2, 2), ceil_mode=1)
        for sq, ex in stage:
            t = fire(net, t, sq, ex)
    t = net.conv(t, classes, 1, bias=True)
    return net.build(net.b.flatten(net.b.global_avgpool(t), axis=1))


CSRNET_CHANNELS = (512, 512, 512, 256, 128, 64)


def csrnet(batch: int = 1, size: int = 14, channels=CSRNET_CHANNELS) -> Graph:
    net = Net("csrnet")
    t = net.b.input("x", (batch, 512, size, size))
    for ch in channels:
        t = net.conv(t, ch, 3, padding=2, dilation=2)
    return net.build(t)
