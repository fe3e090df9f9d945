"""The GPU path of the measured cost model: the same profiler (interleaved rounds, medians,
budget), the same profile cache and the same never-slower comparison, with the CuPy backend's
compiled programs as runners, here on the host emulation of a device (no GPU needed)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.ir import GraphBuilder
from einsat.ir.registry import Op
from einsat.ir.signature import signature_of
from einsat.ir.types import TensorType
from einsat.pipeline import measure
from einsat.runtime import random_inputs, run
from tests.gpu.host_device import HostDevice, KernelLibrary

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
HOST = {"kind": "host", "backend": "cupy", "name": "host emulation of a CUDA device"}


def device_for(graphs):
    """A host device with every kernel of `graphs` compiled (a dry run records them)."""
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    for g in graphs:
        run(g, random_inputs(g), backend=GpuBackend(dry))
    library.build(dry.recorded)
    return HostDevice(library)


def test_cupy_target_profiles_into_the_cache_and_reuses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sigs = [signature_of(Op.RELU, {}, [TensorType((64, 64))]),
            signature_of(Op.ADD, {}, [TensorType((64, 64)), TensorType((64, 64))]),
            signature_of(Op.MATMUL, {}, [TensorType((16, 32)), TensorType((32, 8))])]
    dev = device_for([s.graph() for s in sigs])
    model = measure.cupy_model(dev, HOST)
    assert model.target == "cupy" and model.path.startswith(str(tmp_path)) and "host-cupy-" in model.path
    first = measure.profile(model, sigs, budget_s=60, reps=3)
    assert first.measured == 3 and first.failed == 0 and first.call_overhead_us == 0.0
    assert os.path.exists(model.path) and all(model.db.entries[s.key]["us"] > 0 for s in sigs)
    again = measure.cupy_model(dev, HOST)
    second = measure.profile(again, sigs, budget_s=60, reps=3)
    assert again.loaded == 3 and second.measured == 0 and second.cached == 3
    s = sigs[2]
    assert again.node_cost(s.op, s.attr_dict, list(s.inputs), s.outputs()) == \
        pytest.approx(max(model.db.entries[s.key]["us"], again.fallback.device.view_us))


def test_cupy_target_compares_whole_programs_side_by_side(tmp_path):
    b = GraphBuilder("two")
    x = b.input("x", (32, 32))
    slow = b.build(b.relu(b.relu(b.relu(x))))
    b = GraphBuilder("one")
    fast = b.build(b.relu(b.input("x", (32, 32))))
    dev = device_for([slow, fast])
    model = measure.cupy_model(dev, HOST, path=tmp_path / "p.json")
    c = measure.check_measured(model, slow, fast, reps=5)
    # a verdict of faster is always confirmed by a second block (10 rounds); a first block that
    # said "slower" ends at 5, one the confirmation overruled at 10: which one is the machine's luck
    assert c.backend == "cupy" and (c.rounds == 10 if c.faster else c.rounds in (5, 10))
    assert c.baseline_ms > 0 and c.candidate_ms > 0
    assert np.isfinite(c.p_value)
