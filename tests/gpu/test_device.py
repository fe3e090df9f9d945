"""The array handling every device shares (`ArrayDevice`), checked on the host emulation:
the CuPy device runs this same code over CuPy."""

from __future__ import annotations

import shutil
import weakref

import numpy as np
import pytest

from einsat.errors import ExecutionError
from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.device import pointer
from einsat.gpu.interpreter import run
from einsat.gpu.program import CompiledProgram
from einsat.ir.builder import GraphBuilder
from tests.gpu.host_device import HostDevice, KernelLibrary, library_for

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


@pytest.mark.parametrize("value", [np.float32(2.5), np.array(7, np.int64), np.zeros((0, 3), np.float32),
                                   np.arange(6, dtype=np.float64).reshape(2, 3).T])
def test_upload_and_download_keep_shape_dtype_and_values(value):
    dev = HostDevice(KernelLibrary())
    up = dev.upload(value)
    host = np.asarray(value)
    assert up.shape == host.shape and up.dtype == host.dtype
    back = dev.download(up)
    assert back.shape == host.shape
    np.testing.assert_array_equal(back, host)


def test_copy_in_refuses_another_shape():
    dev = HostDevice(KernelLibrary())
    buf = dev.upload(np.zeros((2, 3), np.float32))
    with pytest.raises(ExecutionError, match=r"\[3, 2\] float32 array into a device buffer \[2, 3\]"):
        dev.copy_in(buf, np.zeros((3, 2), np.float32))


def scalar_program():
    """A 0-d input, a 0-d weight and a loop whose trip count and index are 0-d."""
    b = GraphBuilder("scalars")
    x, s = b.input("x", (2, 3)), b.input("s", ())
    body = GraphBuilder("body")
    i, c = body.input("i", (), np.int64), body.input("c", (2, 3))
    body_g = body.build(body.add(c, body.cast(i, dtype="float32")))
    y = b.mul(b.div(x, s), b.const(np.float32(3.0), name="three"))
    looped = b.loop(b.const(3, dtype=np.int64, name="trip"), y, body=body_g, n_carried=1)
    return b.build(looped)


@needs_cxx
def test_programs_with_0d_values_run_on_the_device_path():
    graph = scalar_program()
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float32(2.0)}
    want = run(graph, feeds)
    library = library_for([(graph, feeds)])
    got = run(graph, feeds, backend=GpuBackend(HostDevice(library)))
    prog = CompiledProgram(graph, device=HostDevice(library))
    compiled = prog.run(feeds)
    for name, w in want.items():
        np.testing.assert_array_equal(got[name], w)
        np.testing.assert_array_equal(compiled[name], w)


def test_workspace_is_one_buffer_that_grows():
    dev = HostDevice(KernelLibrary())
    seen = []
    for nbytes in [1 << 20, 3 << 20, 2 << 20, 8 << 20, 5 << 20, 16 << 20]:
        ptr = dev.workspace(nbytes)
        assert ptr == pointer(dev.workspace_buffer()) and dev.workspace_buffer().nbytes >= nbytes
        seen.append(weakref.ref(dev.workspace_buffer()))
    alive = [r() for r in seen if r() is not None]
    assert len({id(a) for a in alive}) == 1 and alive[0].nbytes == 16 << 20  # the replaced ones are freed


def test_a_held_workspace_outlives_its_replacement():
    dev = HostDevice(KernelLibrary())
    dev.workspace(2 << 20)
    held = dev.workspace_buffer()  # what a captured program keeps: its graph points into it
    ref = weakref.ref(held)
    dev.workspace(4 << 20)
    assert ref() is not None and dev.workspace_buffer() is not held
    del held
    assert ref() is None


@needs_cxx
def test_the_benchmarks_op_by_op_loop_runs_bodies_on_device_values():
    """`benchmarks.gpu_bench.op_by_op` (the GPU session's interpreter timing) calls the backend
    as the interpreter does: the loop node's body runs, and the outputs equal NumPy's."""
    from benchmarks.gpu_bench import op_by_op

    graph = scalar_program()
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float32(2.0)}
    want = run(graph, feeds)
    library = library_for([(graph, feeds)])
    backend = GpuBackend(HostDevice(library))
    once = op_by_op(graph, backend, {n: backend.from_numpy(np.asarray(feeds[n])) for n in graph.inputs})
    for _ in range(2):  # the device-resident inputs are not consumed by a run
        for name, value in zip(graph.outputs, once()):
            np.testing.assert_array_equal(backend.to_numpy(value), want[name])
