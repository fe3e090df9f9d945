"""einsat benchmarks: the papers' workloads, ONNX export, the CPU/GPU harness, PyTorch baselines.

Nothing here is imported by the einsat package; this package imports nothing at import time
(the PyTorch baseline runs in an environment that has neither einsat nor egglog).
"""
