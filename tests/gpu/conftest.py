"""GPU tests: `@pytest.mark.gpu` tests skip unless CuPy is importable and finds a CUDA device.

Tests that need the GPU libraries' wheels but no device (NVRTC through CuPy, cuDNN's
descriptors, the headers) take the fixtures below: they skip where the wheels are absent, and
fail there under `--gpu-libs=required` (`make test-gpu-static`, which installs them)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, Phase, given, settings


@functools.lru_cache(maxsize=1)
def device_available() -> str | None:
    """None when a CUDA device is usable, else the reason it is not."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy finds no CUDA device"
    except Exception as e:  # no driver, or the runtime refuses
        return f"CuPy finds no CUDA device ({type(e).__name__}: {e})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = device_available()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def missing_gpu_libs(config, reason: str):
    """Skip (the wheels are optional) or fail (`--gpu-libs=required`) for want of a GPU library."""
    if config.getoption("--gpu-libs") == "required":
        pytest.fail(f"{reason}; `make test-gpu-static` installs the GPU libraries", pytrace=False)
    pytest.skip(f"{reason} (the GPU libraries' wheels: make test-gpu-static)")


@pytest.fixture(scope="session")
def cupy_module(pytestconfig):
    """CuPy (no device needed: its NVRTC compiler path runs on the CPU)."""
    try:
        import cupy
    except ImportError as e:
        missing_gpu_libs(pytestconfig, f"CuPy is not importable ({e})")
    return cupy


@pytest.fixture(scope="session")
def cudnn_descriptors(pytestconfig):
    """einsat's cuDNN binding on the real libcudnn.so.9, without a handle (no device needed)."""
    from einsat.errors import ExecutionError
    from einsat.gpu.kernels.cudnn import Cudnn
    try:
        return Cudnn(with_handle=False)
    except ExecutionError as e:
        missing_gpu_libs(pytestconfig, f"libcudnn.so.9 does not load ({e})")


def collect(strategy, n: int) -> list:
    """`n` deterministic examples of a strategy (derandomized, no database), as a list."""
    out = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(example):
        out.append(example)

    draw()
    return out
