"""Where the pieces are optimized: in this process, in a process pool, or on a Ray cluster.

Every executor runs `optimize_piece` on each job and returns the results in job order, so the
stitched program does not depend on which worker finished first; the optimization of one piece
is deterministic (`einsat.pipeline.run`), so serial, process-pool and Ray runs give the same program
(unless a time limit, rather than the node or iteration limit, stops a piece's saturation: then
the machine's load decides how far it got, as for any time-limited run).

- "serial": one after the other, in this process;
- "process": this process and `workers - 1` processes of a `concurrent.futures.ProcessPoolExecutor`
  with the "spawn" start method (safe with threads and on every OS; each worker imports einsat
  once and optimizes many pieces) draw the pieces from one queue, largest first;
- "ray": Ray tasks (the `distributed` extra: `pip install einsat[distributed]`), on the cluster at
  `address` (Ray's own default: `RAY_ADDRESS` or a local cluster started for the run).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from einsat.budget import follow, interrupted, listening
from einsat.errors import EinsatError
from einsat.ir.graph import Graph
from einsat.pipeline.options import EXECUTORS, Options

log = logging.getLogger(__name__)

PIECE_MIN_S = 1e-3  # a piece that starts after its share ended: a budget this small returns it unsearched

__all__ = ["EXECUTORS", "PieceResult", "optimize_piece", "run_jobs", "spawn_safe"]


@dataclass
class PieceResult:
    graph: Graph              # the optimized piece
    recipe: Graph | None      # its new weights from the piece's weights (`Options(recipe=True)`)
    report: Any               # the piece's `pipeline.report.Report`
    seconds: float            # wall time of the piece's optimization, in its worker
    pid: int = 0              # the process that optimized it


def optimize_piece(job: tuple) -> PieceResult:
    """Optimize one piece (a job: the piece and its run's `Options`, or `optimize`'s keywords,
    and optionally when the pieces' share of the budget ends, in `time.time()` seconds): a run of
    the pipeline, never partitioned again, with its recipe. With an end, the piece's budget is
    at most the seconds left to it when the piece starts (a worker's start-up and the pieces
    before it in the queue come out of the share, not on top of it)."""
    import time

    from einsat.pipeline import run

    graph, options, *end = job
    if isinstance(options, dict):
        options = Options.of(**options)
    if end and end[0] is not None and options.budget_s is not None:
        options = options.replace(budget=max(min(options.budget_s, end[0] - time.time()), PIECE_MIN_S))
    t0 = time.perf_counter()
    result = run(graph, None, options.replace(recipe=True, partition=False))
    return PieceResult(result.graph, result.recipe, result.report, time.perf_counter() - t0, os.getpid())


def run_jobs(jobs: list[tuple[Graph, Options | dict]], executor: str, workers: int | None = None,
             address: str | None = None, on_done=None) -> list[PieceResult]:
    """`optimize_piece` on every job with `executor`, the results in job order; `on_done(k, result)`
    is called as each finishes (in any order). Once this process had a Ctrl-C (`einsat.budget`:
    the search of a piece running here stops, `report.interrupted`), no further job starts: those
    left have the result None. A worker process ignores SIGINT itself: on this process's first
    Ctrl-C the pool tells its workers to stop their pieces' searches too (their best programs are
    verified and returned as here); on the second it ends them at once."""
    if executor not in EXECUTORS:
        raise EinsatError(f"unknown executor {executor!r}; choose one of {EXECUTORS}")
    workers = max(1, workers or os.cpu_count() or 1)
    results: list[PieceResult | None] = [None] * len(jobs)

    stop = []

    def done(k: int, r: PieceResult) -> None:
        results[k] = r
        if r.report.interrupted:
            stop.append(k)
        if on_done is not None:
            on_done(k, r)

    if executor == "serial" or (executor == "process" and (workers == 1 or len(jobs) <= 1)):
        for k, job in enumerate(jobs):
            if stop or interrupted():
                break
            done(k, optimize_piece(job))
    elif executor == "process":
        _process_pool(jobs, workers, done, stop)
    else:
        for k, r in enumerate(_ray(jobs, workers, address)):
            done(k, r)
    return results  # type: ignore[return-value]


def _follow(event) -> None:  # a worker's initializer: Ctrl-C is for the main process, which sets `event`
    follow(event)


def _end(pool: ProcessPoolExecutor) -> None:
    """The pool's workers ended at once (a second Ctrl-C), the jobs not started dropped."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):  # (3.14 has terminate_workers)
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _process_pool(jobs, workers: int, done, stop: list) -> None:
    """`workers - 1` spawned processes and this process draw jobs from one queue, largest first
    (the longest-processing-time rule: no worker starts a big piece late). This process takes
    the largest piece before the workers are fed, so it starts at once while they are spawned
    and import einsat (a worker that took it would put its start-up on the critical path: with
    reuse, a transformer's one layer piece is most of the work)."""
    import threading
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    queue = sorted(range(len(jobs)), key=lambda k: (-len(jobs[k][0].nodes), k))
    lock = threading.Lock()
    failed: list[BaseException] = []
    ending: list[bool] = []  # a second Ctrl-C: the workers are being ended

    def take() -> int | None:
        with lock:
            return queue.pop(0) if queue and not failed and not stop and not interrupted() else None

    def feed(pool) -> None:  # keeps every worker busy until the queue is empty
        inflight: dict = {}
        k = None
        try:
            while True:
                while len(inflight) < workers - 1 and (k := take()) is not None:
                    inflight[pool.submit(optimize_piece, jobs[k])] = k
                    k = None
                if not inflight:
                    return
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in sorted(finished, key=inflight.get):
                    result = f.result()
                    done(inflight.pop(f), result)
        except BrokenProcessPool:  # a worker died (out of memory?): this process does its jobs
            if ending or interrupted() >= 2:
                return  # ended by a second Ctrl-C
            log.warning("a worker process died: the pieces it held are optimized in this process")
            with lock:
                queue[:0] = sorted(set(inflight.values()) | ({k} if k is not None else set()))
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            failed.append(e)

    context = multiprocessing.get_context("spawn")
    stopped = context.Event()  # set on this process's first Ctrl-C: the workers' searches stop too
    pool = ProcessPoolExecutor(min(workers - 1, len(jobs)), mp_context=context, initializer=_follow,
                               initargs=(stopped,))

    def on_ctrl_c(count: int) -> None:  # from the Ctrl-C watcher thread, at once
        stopped.set()
        if count >= 2:
            ending.append(True)
            _end(pool)

    try:
        with listening(on_ctrl_c):
            first = take()
            helper = threading.Thread(target=feed, args=(pool,), daemon=True)
            helper.start()
            try:
                k = first
                while k is not None:
                    done(k, optimize_piece(jobs[k]))
                    k = take()
            except Exception as e:  # noqa: BLE001 (raised below, once the workers are done)
                failed.append(e)
            helper.join()
            while (k := take()) is not None:  # what a dead worker left
                done(k, optimize_piece(jobs[k]))
    except BaseException:  # a second Ctrl-C (KeyboardInterrupt): the workers end now, not after their pieces
        ending.append(True)
        _end(pool)
        raise
    finally:
        pool.shutdown(wait=True)
    if failed:
        raise failed[0]


def spawn_safe() -> tuple[bool, str]:
    """Whether spawned workers may import the main module again (they do): it has no file (a
    notebook, the REPL), or its top level guards its work with `if __name__ == "__main__":`.
    Otherwise each worker would run the script's work again (a process pool is not used)."""
    import ast
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None:
        return True, ""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return False, f"the main module {path} cannot be read"
    guarded = any(isinstance(n, ast.If) and "__name__" in ast.unparse(n.test) and "__main__" in ast.unparse(n.test)
                  for n in tree.body)
    return guarded, "" if guarded else (f"the main module {path} has no `if __name__ == \"__main__\":` guard, "
                                        "and spawned workers import it again")


def _ray(jobs, workers: int, address: str | None) -> list[PieceResult]:
    try:
        import ray
    except ImportError:
        raise EinsatError("the 'ray' executor needs Ray: pip install 'einsat[distributed]'") from None
    started = False
    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started = True
    try:
        task = ray.remote(optimize_piece)
        return ray.get([task.remote(job) for job in jobs])
    finally:
        if started:
            ray.shutdown()
