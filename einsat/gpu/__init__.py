"""The CuPy backend (kernels, lowering, CUDA graphs, the GPU profiler), run by `einsat.runtime`'s
interpreter loop. Never imports egglog: the GPU machine runs without it."""
