"""einsat's cuDNN descriptors, built in the real libcudnn.so.9 on a machine without a GPU.

Every conv, conv_transpose and fused_conv case the hypothesis strategies draw is lowered on
the host device, whose convolutions go through `Cudnn.descriptors` on the wheel's library
(`HostDevice(cudnn=...)`): cuDNN must accept the tensor, filter and convolution descriptors
einsat sets, and its output dimensions (`cudnnGetConvolutionNdForwardOutputDim`) must equal
einsat's plan (`descriptors` raises otherwise). Only `cudnnCreate` needs a device, and these
calls need no handle. Each plan is then built again in fp64 and fp16, and with TF32 allowed.
"""

from __future__ import annotations

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from tests.gpu.cases import strategy
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice, KernelLibrary

EXAMPLES = 150


class PlanRecorder(HostDevice):
    def __init__(self, cudnn):
        super().__init__(KernelLibrary(), dry=True, cudnn=cudnn)
        self.plans = []

    def conv(self, plan, x, w, y):
        super().conv(plan, x, w, y)
        self.plans.append((plan, self.conv_strides(x)))


@pytest.mark.parametrize("op", ["conv", "conv_transpose", "fused_conv"])
def test_cudnn_accepts_every_drawn_convolution(cudnn_descriptors, op):
    dev = PlanRecorder(cudnn_descriptors)
    for case in collect(strategy(op), EXAMPLES):
        run(case.graph, case.inputs, backend=GpuBackend(dev))
    assert len(dev.plans) >= EXAMPLES * 0.9  # a few cases may run no convolution (empty outputs)
    assert any(p.groups > 1 for p, _ in dev.plans) and any(max(p.dilation) > 1 for p, _ in dev.plans)
    assert any(p.lifted for p, _ in dev.plans) and any(len(p.x_shape) == 5 for p, _ in dev.plans)
    for plan, strides in dev.plans:
        for dtype in (np.float64, np.float16):
            cudnn_descriptors.descriptors(plan, strides, dtype, tf32=False)
        cudnn_descriptors.descriptors(plan, strides, np.float32, tf32=True)


def test_a_plan_cudnn_disagrees_with_is_refused(cudnn_descriptors):
    import dataclasses

    from einsat.errors import ExecutionError
    from einsat.gpu.kernels.cudnn import plan_conv
    plan = plan_conv((1, 2, 9, 9), (4, 2, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1)
    cudnn_descriptors.descriptors(plan, (162, 81, 9, 1), np.float32, False)
    wrong = dataclasses.replace(plan, y_shape=(1, 4, 4, 4))  # cuDNN computes 5 x 5
    with pytest.raises(ExecutionError, match=r"cuDNN computes output \[1, 4, 5, 5\]"):
        cudnn_descriptors.descriptors(wrong, (162, 81, 9, 1), np.float32, False)
