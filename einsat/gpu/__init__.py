"""Execution and profiling. Never imports egglog: the GPU machine runs without it."""

from einsat.gpu.interpreter import run

__all__ = ["run"]
