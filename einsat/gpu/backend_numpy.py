"""The NumPy backend: every op runs its registry reference semantics."""

from __future__ import annotations

import numpy as np


class NumpyBackend:
    name = "numpy"

    @staticmethod
    def from_numpy(array: np.ndarray) -> np.ndarray:
        return array

    @staticmethod
    def to_numpy(value) -> np.ndarray:
        return np.asarray(value)

    @staticmethod
    def execute(node, args, graph) -> list[np.ndarray]:
        return node.definition.numpy(args, node.attrs)


BACKEND = NumpyBackend()
