import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Deterministic, CI-sized hypothesis runs; `HYPOTHESIS_PROFILE=thorough` for more examples.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_addoption(parser):
    parser.addoption("--gpu-libs", choices=("optional", "required"), default="optional",
                     help="tests that need the GPU libraries' wheels (CuPy, NVRTC, cuBLAS, cuDNN) but no device: "
                          "skip them where the wheels are absent (optional), or fail (required: make test-gpu-static)")
