"""The ONNX backend's node test cases, generated from the installed onnx package and cached.

The onnx package describes one small model per op variant (`onnx.backend.test.case.node`), with
inputs and the outputs its reference computes; older releases shipped them as files under
`onnx/backend/test/data/node/`, newer ones generate them in memory, which takes ~20 s. They are
generated once per onnx version into `.pytest_cache/einsat/` (one pickle per case, written to a
temporary folder and renamed: two pytest workers may race, one wins) and read from there.
"""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

CACHE = Path(__file__).resolve().parents[2] / ".pytest_cache" / "einsat" / f"onnx-{onnx.__version__}-node-cases"


def case_names() -> list[str]:
    """The names of all node cases, sorted (generating the cache on first use)."""
    if not CACHE.is_dir():
        _generate()
    return sorted(p.stem for p in CACHE.glob("*.pkl"))


def read_case(name: str):
    """(model, data sets [(inputs, outputs)], rtol, atol) of one case; values as NumPy arrays,
    lists (sequences) or None (an empty optional)."""
    with open(CACHE / f"{name}.pkl", "rb") as f:
        model_bytes, data_sets, rtol, atol = pickle.load(f)
    return onnx.load_from_string(model_bytes), data_sets, rtol, atol


def _generate() -> None:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    tmp = CACHE.with_name(f"{CACHE.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for case in cases:
        data = [([_value(v) for v in ins], [_value(v) for v in outs]) for ins, outs in case.data_sets]
        with open(tmp / f"{case.name}.pkl", "wb") as f:
            pickle.dump((case.model.SerializeToString(), data, case.rtol, case.atol), f)
    try:
        tmp.rename(CACHE)
    except OSError:  # another worker was first
        shutil.rmtree(tmp, ignore_errors=True)


def _value(v):
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v if v is None else np.asarray(v)
