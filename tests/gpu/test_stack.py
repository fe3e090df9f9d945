"""The `gpu` extra installs a complete stack: CuPy with NVRTC, cuBLAS, cuDNN 9 and the CUDA
headers, all found where einsat looks for them (einsat.gpu.kernels.libload) and loadable on a
machine without a GPU or driver (make test-gpu-static installs the extra into its own venv)."""

from __future__ import annotations

import os

import pytest

from einsat.gpu.kernels import libload


@pytest.mark.parametrize("name", ["cudart", "cublasLt", "cublas", "nvrtc", "cudnn"])
def test_every_library_is_found_in_the_wheels_and_loads(cupy_module, name):
    found = libload.candidates(name)
    assert found and all(os.sep + "nvidia" + os.sep in p for p in found[:1]), found
    assert libload.load(name) is not None


def test_cudnn_is_version_9_and_nvrtc_is_cuda_13(cupy_module, cudnn_descriptors):
    assert 90000 <= cudnn_descriptors.version() < 100000
    from cupy.cuda import nvrtc
    assert nvrtc.getVersion()[0] == 13


def test_nvrtc_finds_the_cuda_headers(cupy_module):
    dirs = libload.cuda_include_dirs()
    assert dirs and os.path.exists(os.path.join(dirs[0], "cuda_fp16.h"))
