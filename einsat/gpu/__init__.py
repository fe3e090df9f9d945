"""The CuPy backend (kernels, lowering, CUDA graphs, the GPU profiler), run by `einsat.runtime`'s
interpreter loop, registered with it as "cupy" by `einsat.backends`; its profiler times through
runtime's timing loop into `einsat.cost`'s profile database. Never imports egglog: the GPU machine
runs without it."""
