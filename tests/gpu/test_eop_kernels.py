"""eOperator kernels on the host emulation: floor semantics, strided views, guards, NaN-propagating
max, scopes, integers — each against the eop's NumPy semantics."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.ir import GraphBuilder
from einsat.ir.expr import Call, Const, Expr, Guard, Iter, fingerprint, var
from einsat.ir.expr.build import read
from tests.gpu.host_device import HostDevice, KernelLibrary

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

i, k = var("i"), var("k")
EXPRS = {
    # floor division and modulo of negative numbers: C's / and % would truncate
    "negative_floor": (Expr((Iter("i", -5, 9),), (),
                            Call("add", (read(0, (i - 3).floordiv(2) + 2), read(0, (i - 3).mod(4))))), [(6,)]),
    "guarded_taps": (Expr((Iter("i", 0, 9),), (Iter("k", 0, 4),),
                          Guard((i - k * 3 + 1).mod(2), 0, 1,
                                Call("mul", (read(0, "k"), read(1, (i - k * 3 + 1).floordiv(2)))))), [(4,), (3,)]),
    "max_with_nan": (Expr((Iter("i", 0, 3),), (Iter("k", 0, 4),), read(0, "i", "k"), "max"), [(3, 4)]),
    "scope_in_scope": (Expr((Iter("i", 0, 5),), (),
                            Call("relu", (read(Expr((Iter("t", -1, 5),), (Iter("s", 0, 2),),
                                                    Call("mul", (read(0, var("t") + var("s")), Const(-1.5)))),
                                               i - 1),))),
                       [(6,)]),
    "two_dims_strided": (Expr((Iter("a", 0, 3), Iter("b", 0, 4)), (Iter("k", 0, 2),),
                              Call("mul", (read(0, var("b"), var("a") + k), read(1, "k")))), [(4, 4), (2,)]),
}


def run_host(graph, inputs):
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    run(graph, inputs, backend=GpuBackend(dry, name="host-dry"))
    library.build(dry.recorded)
    backend = GpuBackend(HostDevice(library), name="host")
    out = run(graph, inputs, backend=backend)
    assert backend.host_fallbacks == {}
    assert {kern.family for kern in dry.recorded} >= {"eop"}
    return out


@pytest.mark.parametrize("name", sorted(EXPRS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eop_kernel_matches_numpy(name, dtype, rng):
    e, shapes = EXPRS[name]
    b = GraphBuilder(name)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if name == "max_with_nan":
        arrays[0][1, 2] = np.nan
    ins = [b.input(f"x{j}", a.shape, a.dtype) for j, a in enumerate(arrays)]
    if name == "two_dims_strided":  # a transposed view of the first input
        ins[0] = b.transpose(ins[0], perm=(1, 0))
    g = b.build(b.eop(*ins, expr=fingerprint(e)))
    feeds = {f"x{j}": a for j, a in enumerate(arrays)}
    want = run(g, feeds)
    got = run_host(g, feeds)
    for name_out in g.outputs:
        np.testing.assert_allclose(got[name_out], want[name_out], rtol=1e-6, atol=1e-6)
        if name == "max_with_nan":
            assert np.isnan(got[name_out][1]) and not np.isnan(got[name_out][[0, 2]]).any()


def test_integer_eops_are_exact(rng):
    b = GraphBuilder("ints")
    x = b.input("x", (4, 5), np.int32)
    e = Expr((Iter("i", 0, 4),), (Iter("k", -1, 6),), Call("mul", (read(0, "i", "k"), Const(3.0))))
    g = b.build(b.eop(x, expr=fingerprint(e)))
    feeds = {"x": rng.integers(-9, 9, (4, 5)).astype(np.int32)}
    np.testing.assert_array_equal(run_host(g, feeds)[g.outputs[0]], feeds["x"].sum(1) * 3)
