"""What the benchmark tests share: the size each workload is tested at, and how outputs compare.

SMALL: batch 1, the papers' sizes where they are small, reduced spatial size / depth / sequence
where the paper's would take too long on a CPU (each reduction keeps every kind of layer).
"""

import numpy as np

# float32 programs computed in different summation orders (BLAS blocking, onnxruntime's and
# PyTorch's kernels): observed max differences are ~1e-6 of the output's scale; 1e-4 leaves a
# 100x margin for depth
REL = 1e-4


def assert_close_scaled(got, want, rel=REL, what=""):
    """max |got - want| <= rel * max |want|."""
    scale = float(np.abs(want).max(initial=0.0))
    err = float(np.abs(np.asarray(got, np.float64) - want).max(initial=0.0))
    assert err <= rel * max(scale, 1e-30), f"{what}: max error {err:.3g} vs output scale {scale:.3g}"


SMALL = {
    "resnet18": {"image": 64},
    "csrnet": {},                                    # the paper's [1, 512, 14, 14]
    "inception_v3": {"image": 75},                   # the smallest input the stem accepts
    "bert": {"seq": 64, "layers": 2},                # hidden 768, 12 heads, FFN 3072 kept
    "infogan": {},
    "dcgan": {},
    "fsrcnn": {},
    "gcn": {"image": 64},
    "longformer": {"seq": 256, "width": 16},         # hidden 512, 8 heads, dilation 4 kept
    "bert_tensat": {"layers": 2},                    # [64, 1024], 16 heads kept
    "nasrnn": {},
    "resnext50": {"image": 64, "blocks": (1, 1, 1, 1)},
    "nasnet_a": {"size": 8, "channels": 16, "cells": 2},
    "squeezenet": {"image": 64},
    "vgg19": {"image": 32, "hidden": 512},
    "pet_conv": {},
    "pet_dilated_conv": {},
    "pet_group_conv": {},
    "pet_batch_matmul": {},
    "einnet_conv3x3": {},
    "einnet_conv_transpose": {},                     # the paper's batch 16
    "einnet_conv5x5": {"batch": 1, "size": 32},
    "einnet_g2bmm": {"seq": 256, "width": 16},       # batch 8 (heads), 64-wide rows, dilation 4 kept
}
