"""GPU tests: `@pytest.mark.gpu` tests skip unless CuPy is importable and finds a CUDA device."""

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
