"""PET's admission proofs run with OpenBLAS at one thread, and the process's setting comes back."""

import threading

import pytest

from einsat.rewrites.mutate import admit as admit_module
from einsat.rewrites.mutate import blas
from einsat.testing.mutants import batch_to_width
from tests.rewrites.mutate.test_admit import W, original

api = blas._openblas()
needs_openblas = pytest.mark.skipif(api is None, reason="NumPy here does not use OpenBLAS")


@needs_openblas
def test_one_thread_inside_and_the_setting_restored_after_nested_blocks():
    set_, get = api
    before = get()
    set_(2)
    try:
        with blas.one_thread():
            assert get() == 1
            with blas.one_thread():
                assert get() == 1
            assert get() == 1  # the inner block's exit does not restore while the outer one runs
        assert get() == 2
    finally:
        set_(before)


@needs_openblas
def test_concurrent_blocks_restore_once_the_last_one_leaves():
    set_, get = api
    before = get()
    set_(2)
    inside, leave = threading.Event(), threading.Event()

    def hold():
        with blas.one_thread():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=hold)
    try:
        t.start()
        assert inside.wait(10)
        with blas.one_thread():
            assert get() == 1
        assert get() == 1  # the other block still runs
        leave.set()
        t.join(10)
        assert get() == 2
    finally:
        leave.set()
        t.join(10)
        set_(before)


@needs_openblas
def test_admission_proves_at_one_thread(monkeypatch):
    seen = []
    real = admit_module.find_differences

    def spy(a, b, **kw):
        seen.append(api[1]())
        return real(a, b, **kw)

    monkeypatch.setattr(admit_module, "find_differences", spy)
    verdict = admit_module.admit(original(), batch_to_width(4, 2, 5, 6, W, seed=0))
    assert verdict.graph is not None and seen == [1]
