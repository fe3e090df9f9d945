"""The memory of a run (`einsat.pipeline.memory`): measured, and bounded with a graceful stop."""

import contextlib
import gc
import itertools
import mmap

import numpy as np

import einsat
from einsat.budget import Budget
from einsat.egraph.session import Limits
from einsat.pipeline import memory
from tests.test_optimize import chain


@contextlib.contextmanager
def no_collection():
    """The garbage of earlier tests collected now, and none collected inside the block: a collection
    there frees what other tests left (e-graphs, hundreds of MB) and hides the block's own growth."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def fresh_pages(nbytes: int):
    """`nbytes` of new anonymous memory, a byte written in every page: resident for sure. (np.ones
    is not: a clean-checkout run saw 64 MiB of it add 4 KiB, the allocator reusing memory it held.)"""
    with mmap.mmap(-1, nbytes) as pages:
        view = np.frombuffer(pages, dtype=np.uint8)
        view[::mmap.PAGESIZE] = 1
        del view  # the mapping cannot close while an array looks at it
        yield


def test_the_watch_sees_an_allocation_and_its_peak():
    with no_collection(), memory.MemoryWatch() as watch:
        with fresh_pages(64 * 2**20):
            watch.sample()  # what the thread does every 20 ms, here while the pages surely live
    assert watch.added_bytes >= 48 * 2**20
    assert watch.peak_bytes >= watch.start_bytes + watch.added_bytes - 1
    assert not watch.exceeded


def test_passing_the_limit_cancels_the_budget_with_its_reason():
    budget = Budget()
    with no_collection(), memory.MemoryWatch(limit_bytes=16 * 2**20, budget=budget) as watch:
        with fresh_pages(64 * 2**20):
            watch.sample()  # the thread's sample, taken here: a loaded machine may not schedule it in time
    assert watch.exceeded and budget.cancelled and budget.reason == memory.MEMORY_LIMIT


def test_optimize_stops_gracefully_at_the_memory_limit(monkeypatch):
    """Resident memory that grows by 1 GB per sample: the search stops after its first check,
    and the best program so far is still extracted, verified and returned."""
    real = memory.resident_bytes()
    grow = itertools.count()
    monkeypatch.setattr(memory, "resident_bytes", lambda: real + next(grow) * 2**30)
    result = einsat.optimize(chain("left"), limits=Limits(memory_gb=1.5))
    r = result.report
    assert r.interrupted and r.stop == "memory limit" and r.memory["exceeded"]
    assert r.saturation.stop_reason == "memory limit"
    assert r.verification is not None and r.verification.proved
    text = str(r)
    assert "(memory limit: the best program found so far)" in text and "LIMIT REACHED" in text


def test_optimize_reports_its_memory_and_none_means_unbounded():
    r = einsat.optimize(chain("left"), limits=Limits(memory_gb=None)).report
    assert r.memory["limit_bytes"] is None and not r.memory["exceeded"] and not r.interrupted
    assert r.memory["peak_bytes"] >= r.memory["start_bytes"] > 0
    assert "memory: peak" in str(r) and "(unbounded)" in str(r)
    assert "<b>memory</b>: peak" in r._repr_html_()
    assert einsat.optimize(chain("left")).report.memory["limit_bytes"] == 4 * 2**30


def test_a_partitioned_run_reports_this_process_memory_too():
    from einsat.partition import Partitioning
    r = einsat.optimize(chain("left"), partition=Partitioning(above=0, piece_nodes=2, executor="serial")).report
    assert r.partition is not None
    assert r.memory["limit_bytes"] == 4 * 2**30 and r.memory["peak_bytes"] >= r.memory["start_bytes"] > 0
