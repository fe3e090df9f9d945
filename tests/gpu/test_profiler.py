"""The profiler's host-side pieces (inputs, replicated programs, the CLI without a GPU), and,
on a GPU, timings that make sense."""

from __future__ import annotations

import numpy as np
import pytest

from einsat.cli import main
from einsat.gpu.profiler import replicated
from einsat.ir.registry import Op
from einsat.ir.signature import signature_of, write_signatures
from einsat.ir.types import TensorType


def gather_sig():
    return signature_of(Op.GATHER, {"axis": 1}, [TensorType((4, 7)), TensorType((3, 2), np.int64)])


def test_replicated_program_repeats_the_op():
    g = replicated(gather_sig().graph(), 4)
    assert [n.op for n in g.nodes] == [Op.GATHER] * 4 and len(g.outputs) == 1


def test_profile_command_without_a_gpu_fails_cleanly(tmp_path, capsys):
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed: this checks the message on machines without it")
    except ImportError:
        pass
    sigs = tmp_path / "s.json"
    write_signatures(sigs, [gather_sig()])
    out = tmp_path / "p.json"
    assert main(["profile", str(sigs), "--out", str(out)]) == 2
    assert "needs CuPy" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.gpu
def test_profiler_times_scale_with_work():
    from einsat.extract.profile_db import ProfileDB
    from einsat.gpu.profiler import Profiler
    small = signature_of(Op.MATMUL, {}, [TensorType((256, 256)), TensorType((256, 256))])
    big = signature_of(Op.MATMUL, {}, [TensorType((2048, 2048)), TensorType((2048, 2048))])
    view = signature_of(Op.TRANSPOSE, {"perm": (1, 0)}, [TensorType((64, 64))])
    db = Profiler(reps=20).profile([small, big, view], ProfileDB())
    assert not db.failures
    e_small, e_big, e_view = (db.entries[s.key] for s in (small, big, view))
    assert e_view["kernels"] == 0 and e_view["us"] == 0.0
    assert e_big["us"] > 10 * e_small["us"] > 0 and e_big["warm_us"] > 0
    assert db.device["kind"] in ("h100", "h200") or db.device["name"]
    # 2·2048³ FLOPs in strict fp32 cannot beat the fp32 peak (~67 TFLOP/s on Hopper)
    assert 2 * 2048**3 / (e_big["us"] * 1e-6) < 80e12
