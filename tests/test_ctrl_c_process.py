"""Real SIGINTs to a real `einsat optimize` process (issue 38): in saturation, extraction,
verification, the measured check and a partitioned run (pieces in a worker process included),
once and twice, checking what it says, what it wrote and its exit status.

Where the signal lands is not left to the clock: the test-only `EINSAT_TEST_HOLD=PHASE:N`
(`einsat.budget.hold`) makes the run wait at the start of PHASE until it had N Ctrl-Cs, saying so
on stderr, and the test sends its first SIGINT when it reads that line and its second when it
reads the acknowledgement of the first. One test sends no hold: its two SIGINTs land in a real
saturation, while the main thread is inside egglog. Every wait reads lines with a generous
timeout: a loaded machine makes these tests slower, never different.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import einsat
from einsat.ir import GraphBuilder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300  # for a line, or for the process to end: far beyond a loaded machine's slowness
FIRST = "einsat: Ctrl-C: stopping the search"
SECOND = "einsat: Ctrl-C again: stopping now"
NOTHING = "nothing was written to"
NOT_VERIFIED = "no program had been verified yet"
WROTE_VERIFIED = "interrupted twice: wrote the best program verified so far"


class Optimize:
    """`python -m einsat.cli optimize ...` in its own session, its stderr read line by line."""

    def __init__(self, args: list[str], tmp_path: Path, hold: str | None = None):
        env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"))
        env.pop("EINSAT_TEST_HOLD", None)
        if hold is not None:
            env["EINSAT_TEST_HOLD"] = hold
        self.proc = subprocess.Popen([sys.executable, "-m", "einsat.cli", "optimize", *args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append(None)  # end of stderr
            self.changed.notify_all()

    def wait_for(self, text: str, count: int = 1) -> None:
        """Until `count` lines of stderr contain `text` (the process must not end first)."""
        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while sum(1 for line in self.lines if line and text in line) < count:
                assert None not in self.lines, f"the run ended before {count} line(s) {text!r}:\n{self.err}"
                assert self.changed.wait(max(0.0, deadline - time.monotonic())), \
                    f"no {count} line(s) {text!r} in {WAIT_S} s:\n{self.err}"

    def interrupt(self, group: bool = False) -> None:
        """SIGINT to the process (`group`: to its whole process group, as a terminal's Ctrl-C)."""
        if group:
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            os.kill(self.proc.pid, signal.SIGINT)

    def twice(self, group: bool = False) -> None:
        self.interrupt(group)
        self.wait_for(FIRST)
        self.interrupt(group)

    def finish(self) -> tuple[int, str, str]:
        try:
            out = self.proc.stdout.read()
            code = self.proc.wait(WAIT_S)
        finally:
            self.kill()
        self.reader.join(WAIT_S)
        return code, out, self.err

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    @property
    def err(self) -> str:
        return "".join(line for line in self.lines if line)


@pytest.fixture
def run(tmp_path):
    started: list[Optimize] = []

    def start(args, hold=None):
        started.append(Optimize([str(a) for a in args], tmp_path, hold))
        return started[-1]

    yield start
    for r in started:
        r.kill()


def block():
    """Two matmuls over one input: the search merges them (a program that differs from the input,
    so it is verified by running both)."""
    b = GraphBuilder("block")
    x = b.input("x", (8, 16))
    w1, w2 = b.weight("w1", (16, 16)), b.weight("w2", (16, 16))
    return b.build(b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2))))


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "block.onnx"
    einsat.save_onnx(block(), path)
    return path


def assert_same_function(source, path: Path) -> None:
    """The file at `path` is a valid model computing what `source` computes."""
    written = einsat.load_onnx(path)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    want, got = einsat.run(source, {"x": x}), einsat.run(written, {"x": x})
    for name in source.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def assert_clean(err: str) -> None:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.count(FIRST) == 1, err  # each Ctrl-C acknowledged once, by the process
    assert "verifying the best program found so far" not in err, err  # a piece's or a context's own word


# -- twice: stopped at once, nothing verified yet: nothing written, status 130 -------------------
@pytest.mark.parametrize("phase", ["saturate", "extract", "verify"])
def test_twice_in_a_phase_stops_at_once_and_writes_nothing(run, model, tmp_path, phase):
    out = tmp_path / "out.onnx"
    r = run([model, "-o", out], hold=f"{phase}:2")
    r.wait_for(f"test hold: {phase}")
    r.twice()
    code, stdout, err = r.finish()
    assert code == 130, err
    assert_clean(err)
    assert SECOND in err and NOTHING in err and NOT_VERIFIED in err and f"its {phase} phase" in err, err
    assert not out.exists() and stdout == ""  # no summary: the run did not finish
    assert list(tmp_path.glob("out*")) == []  # no half-written file beside it either


def test_first_in_the_search_second_in_verification_stops_at_once(run, model, tmp_path):
    """The case of the issue: the pipeline's search context closed between the two Ctrl-Cs, and
    the second one, in verification, was swallowed (the run went on and exited 0)."""
    out = tmp_path / "out.onnx"
    r = run([model, "-o", out], hold="extract:1,verify:2")
    r.wait_for("test hold: extract")
    r.interrupt()
    r.wait_for(FIRST)
    r.wait_for("test hold: verify")
    r.interrupt()
    code, _, err = r.finish()
    assert code == 130, err
    assert_clean(err)
    assert SECOND in err and NOT_VERIFIED in err and "its verify phase" in err, err
    assert not out.exists()


def test_twice_in_the_measured_check_writes_the_verified_program(run, tmp_path):
    """A `--cost cpu` run is past its verification when it times the result against the input:
    the second Ctrl-C writes the verified program, which the run had not finished checking."""
    pytest.importorskip("onnxruntime")
    b = GraphBuilder("tt")
    x = b.input("x", (16, 24))
    t = b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0))
    source = b.build(b.relu(b.matmul(t, b.weight("w", (24, 8)))))
    einsat.save_onnx(source, tmp_path / "tt.onnx")
    out = tmp_path / "out.onnx"
    r = run([tmp_path / "tt.onnx", "-o", out, "--cost", "cpu", "--profile-budget", "60"], hold="measure:2")
    r.wait_for("test hold: measure")
    r.twice()
    code, stdout, err = r.finish()
    assert code == 130, err
    assert_clean(err)
    assert SECOND in err and WROTE_VERIFIED in err and stdout == "", err
    written = einsat.load_onnx(out)
    assert written.op_counts().get("transpose", 0) == 0  # the optimized program, not the input
    feeds = {"x": np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)}
    np.testing.assert_allclose(einsat.run(written, feeds)[written.outputs[0]],
                               einsat.run(source, feeds)[source.outputs[0]], rtol=1e-5, atol=1e-5)


def test_twice_in_a_real_saturation_stops_at_once(run, tmp_path):
    """No hold: both Ctrl-Cs reach a saturation of ResNet-18 under way (the main thread in
    egglog, running no Python code), whose limits are far off."""
    from einsat.cli.demo import demo_model_path
    out = tmp_path / "out.onnx"
    r = run([demo_model_path(), "-o", out, "--fill-weights", "random", "--nodes", "200000", "--iterations", "50",
             "--search-seconds", "600"])
    r.wait_for("saturate   step")
    r.twice()
    code, stdout, err = r.finish()
    assert code == 130, err
    assert_clean(err)
    assert SECOND in err and NOT_VERIFIED in err and not out.exists() and stdout == "", err


# -- once: the search stops, the best program found is verified and written, status 0 ----------
@pytest.mark.parametrize("phase", ["saturate", "extract", "verify"])
def test_once_in_a_phase_writes_the_verified_best_program(run, model, tmp_path, phase):
    out = tmp_path / "out.onnx"
    r = run([model, "-o", out], hold=f"{phase}:1")
    r.wait_for(f"test hold: {phase}")
    r.interrupt()
    code, stdout, err = r.finish()
    assert code == 0, err
    assert_clean(err)
    assert "(interrupted: the best program found so far)" in stdout and f"wrote {out}" in stdout, stdout
    assert "verification: proved" in stdout or "verification: identical" in stdout, stdout
    if phase == "saturate":  # stopped before its first rewrite: the input program
        assert "stopped: interrupted" in stdout, stdout
    else:  # saturation ended by its own bounds: the search found the merged matmuls
        assert "stopped: interrupted" not in stdout and "verification: proved" in stdout, stdout
    assert_same_function(block(), out)


# -- a partitioned run: pieces in this process and in a worker -------------------------------------
def partitioned(run, tmp_path, hold: str):
    from tests.partition.common import stacked
    source = stacked(layers=3)
    einsat.save_onnx(source, tmp_path / "stack.onnx")
    out = tmp_path / "out.onnx"
    # three distinct pieces, two processes: this one takes a piece, the worker another, the third waits
    r = run([tmp_path / "stack.onnx", "-o", out, "--partition-above", "0", "--no-reuse", "--parallel", "2",
             "--executor", "process"], hold=hold)
    r.wait_for("test hold: saturate", count=2)  # a piece in each process, its search held
    return r, source, out


def test_once_in_a_partitioned_run_stops_the_workers_search_too(run, tmp_path):
    """The first SIGINT to the main process alone: its piece's search stops, and so does the
    worker's (held until its parent tells it: without that it would wait forever); the third
    piece never starts; the stitched program is verified and written."""
    r, source, out = partitioned(run, tmp_path, "saturate:1")
    r.interrupt()
    code, stdout, err = r.finish()
    assert code == 0, err
    assert_clean(err)
    assert "interrupted (2 pieces)" in stdout and stdout.count("not optimized: the run was interrupted") == 1, stdout
    assert "verification: identical" in stdout or "verification: proved" in stdout, stdout
    from tests.partition.common import assert_same_function as same
    same(source, einsat.load_onnx(out))


def test_twice_in_a_partitioned_run_ends_the_workers_at_once(run, tmp_path):
    """Ctrl-C twice to the process group, as from a terminal: the workers ignore it themselves;
    the second ends them at once (held, they would never end on their own), nothing was verified."""
    psutil = pytest.importorskip("psutil")
    r, _, out = partitioned(run, tmp_path, "saturate:2")
    workers = [p for p in psutil.Process(r.proc.pid).children(recursive=True)
               if "spawn_main" in " ".join(p.cmdline())]
    assert workers, "no worker process"
    r.twice(group=True)
    code, stdout, err = r.finish()
    assert code == 130, err
    assert_clean(err)
    assert SECOND in err and NOT_VERIFIED in err and "its optimize phase" in err and not out.exists(), err
    _, alive = psutil.wait_procs(workers, timeout=WAIT_S)
    assert not alive, f"workers still running: {alive}"
