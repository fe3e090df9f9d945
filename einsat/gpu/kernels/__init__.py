"""CUDA code generation and the library bindings (cuBLAS, cuDNN) of the GPU backend.

The generators (`codegen`, `elementwise`, `layout`, `reduce`) and the planners in `cublas` and
`cudnn` are pure Python: they run, and are tested, without CuPy or a GPU.
"""
