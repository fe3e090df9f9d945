"""Kept for code that imports the interpreter from here: it is `einsat.runtime` now."""

from einsat.runtime import check_inputs, get_backend, run

__all__ = ["check_inputs", "get_backend", "run"]
