"""`make lab` opens the notebooks in JupyterLab: the command the Makefile runs (read with `make -n lab`)
is started on loopback, without a browser, under a token, and asked through its REST API what a
user's browser would ask: a jupytext `.py` notebook opens as a notebook with its cells, a double
click on a `.py` file opens the Jupytext notebook viewer, a `python3` kernel starts on this venv
and imports einsat, and a notebook saved from the browser is written back as a percent-format `.py`
file. The server and its kernels are stopped at the end, in a few seconds.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "03_pet_corrections.py"
START_S = 60  # the server answers within this many seconds, or the test fails with its log


def lab_command() -> list[str]:
    """The command `make lab` runs, as arguments (its venv set-up, if due, is only printed)."""
    out = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "lab"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    text = out.replace("\\\n", " ")
    lines = [line for line in text.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, f"make -n lab runs no single `jupyter lab`:\n{out}"
    return shlex.split(lines[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, port: int, token: str, runtime: Path, venv: Path):
        self.base, self.token, self.runtime, self.venv = f"http://127.0.0.1:{port}", token, runtime, venv

    def call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    cmd = lab_command()
    exe = ROOT / cmd[0] if not Path(cmd[0]).is_absolute() else Path(cmd[0])
    assert exe.is_file(), f"make lab runs {cmd[0]}, which is not installed (the notebooks extra)"
    home = tmp_path_factory.mktemp("lab-home")
    port, token = free_port(), secrets.token_hex(16)
    # The user's own Jupyter settings stay out of it (and untouched); .venv's, where jupytext enables
    # its server extension, stay in.
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
    log = (home / "lab.log").open("w")
    proc = subprocess.Popen([str(exe), *cmd[1:], "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                             f"--IdentityProvider.token={token}"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Lab(port, token, home / "runtime", exe.parent.parent.resolve())
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, f"jupyter lab exited with {proc.returncode}:\n{(home / 'lab.log').read_text()}"
            try:
                server.call("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"no answer in {START_S} s:\n{(home / 'lab.log').read_text()}"
                time.sleep(0.25)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_make_lab_serves_the_notebooks_folder(lab):
    listing = lab.call("GET", "/api/contents/")
    names = {item["name"] for item in listing["content"]}
    assert NOTEBOOK in names and "README.md" in names


def test_a_jupytext_py_file_opens_as_a_notebook_with_its_cells(lab):
    model = lab.call("GET", f"/api/contents/{NOTEBOOK}?type=notebook&content=1")
    assert model["type"] == "notebook" and model["format"] == "json"
    cells = model["content"]["cells"]
    expected = jupytext.read(ROOT / "notebooks" / NOTEBOOK).cells
    assert [c["cell_type"] for c in cells] == [c.cell_type for c in expected]
    assert [c["source"] for c in cells] == [c.source for c in expected]
    assert {"markdown", "code"} <= {c["cell_type"] for c in cells} and len(cells) >= 10
    assert model["content"]["metadata"]["jupytext"]["text_representation"]["format_name"] == "percent"


def test_a_double_click_opens_a_py_file_in_the_jupytext_notebook_viewer(lab):
    plugin = lab.call("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert plugin["schema"]["properties"]["defaultViewers"]["default"].get("python") == "Jupytext Notebook"


def test_a_python3_kernel_starts_on_this_venv_and_imports_einsat(lab):
    from jupyter_client import BlockingKernelClient

    kernel = lab.call("POST", "/api/kernels", {"name": "python3"})
    client = BlockingKernelClient()
    try:
        client.load_connection_file(str(lab.runtime / f"kernel-{kernel['id']}.json"))
        client.start_channels()
        client.wait_for_ready(timeout=START_S)
        out = []
        reply = client.execute_interactive("import sys, einsat; print(sys.prefix)", timeout=START_S,
                                           output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        assert Path("".join(out).strip()).resolve() == lab.venv  # make lab's venv, where einsat is installed
    finally:
        client.stop_channels()
        lab.call("DELETE", f"/api/kernels/{kernel['id']}")


def test_a_notebook_saved_from_lab_is_written_as_a_percent_py_file(lab):
    name = f"_lab_save_check_{secrets.token_hex(4)}.py"
    path = ROOT / "notebooks" / name
    model = lab.call("GET", f"/api/contents/{NOTEBOOK}?type=notebook&content=1")
    try:
        lab.call("PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json",
                                                   "content": model["content"]})
        text = path.read_text()
        assert text.startswith("# ---\n# jupyter:") and "# %% [markdown]" in text
        assert [c.source for c in jupytext.reads(text, fmt="py:percent").cells] == \
               [c["source"] for c in model["content"]["cells"]]
        lab.call("DELETE", f"/api/contents/{name}")
        assert not path.exists()
    finally:
        path.unlink(missing_ok=True)
