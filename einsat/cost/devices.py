"""GPU specifications for the analytic roofline cost model.

Sources (NVIDIA datasheets, dense figures, i.e. without structured sparsity):
- H100 SXM5 80 GB ("NVIDIA H100 Tensor Core GPU" datasheet): FP32 66.9 TFLOP/s on CUDA cores,
  TF32 tensor cores 494.7 TFLOP/s (989 with sparsity), FP16/BF16 tensor cores 989.4 TFLOP/s
  (1979 with sparsity), HBM3 3.35 TB/s.
- H200 SXM 141 GB ("NVIDIA H200 Tensor Core GPU" datasheet): the same Hopper GH100 compute
  (FP32 67, TF32 494.7, FP16 989.4 TFLOP/s dense) and HBM3e 4.8 TB/s.

Assumptions (not datasheet figures; `MeasuredCost` replaces them with measurements):
- kernel launch overhead 2 µs per kernel: between a CUDA-graph replay (~1 µs per node) and an
  eager launch from Python (~3–5 µs);
- real kernels reach 70% of the compute peak and 80% of the HBM bandwidth;
- a view (reshape, squeeze, split, ...) costs 0.1 µs: no kernel, but not free, so that an
  extraction never prefers a chain of views to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Device:
    """Peak rates of one GPU (FLOP/s and bytes/s) and the per-kernel overheads (µs)."""

    name: str
    fp32_flops: float
    tf32_flops: float
    fp16_flops: float
    hbm_bytes_per_s: float
    launch_us: float = 2.0
    view_us: float = 0.1
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8

    def peak_flops(self, dtype: np.dtype, tensor_core: bool, tf32: bool) -> float:
        """The attainable FLOP/s for `dtype`; tensor cores only for matmul/conv-like ops."""
        dtype = np.dtype(dtype)
        half = dtype == np.float16 or dtype.name == "bfloat16"
        if tensor_core and half:
            peak = self.fp16_flops
        elif tensor_core and tf32 and dtype == np.float32:
            peak = self.tf32_flops
        elif dtype == np.float64:
            peak = self.fp32_flops / 2  # Hopper's FP64 CUDA-core rate is half its FP32 rate
        else:
            peak = self.fp32_flops
        return peak * self.compute_efficiency

    @property
    def bandwidth(self) -> float:
        """Attainable bytes/s."""
        return self.hbm_bytes_per_s * self.memory_efficiency


H100 = Device("h100", fp32_flops=66.9e12, tf32_flops=494.7e12, fp16_flops=989.4e12,
              hbm_bytes_per_s=3.35e12)
H200 = Device("h200", fp32_flops=66.9e12, tf32_flops=494.7e12, fp16_flops=989.4e12,
              hbm_bytes_per_s=4.8e12)

DEVICES = {d.name: d for d in (H100, H200)}


# The prior a CPU profile's calibration starts from (a weak one: `CalibratedRoofline.fit` moves
# away from it as soon as there are measurements): a two-core AVX-512 server's order of
# magnitude, onnxruntime's per-node overhead inside a session of about 1 µs, views about 0.3 µs.
# Not a datasheet figure: `cost="cpu"` measures the machine at hand.
CPU = Device("cpu", fp32_flops=100e9, tf32_flops=100e9, fp16_flops=100e9, hbm_bytes_per_s=20e9,
             launch_us=1.0, view_us=0.3)
