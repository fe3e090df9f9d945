"""The HTML report is a page (issue 31): rendered in headless Chromium, it logs no console error
and each of its pictures draws (its region of the screenshot is not one colour).

The report is made here, on a small program, the way `einsat demo --report` writes
build/demo-report.html (`cli.optimize.write_report`). Chromium is Debian's (/usr/bin/chromium,
installed by `make chromium`, which `make test` depends on), driven over its DevTools protocol on
a pipe (`--remote-debugging-pipe`: JSON messages ending in a NUL byte on fds 3 and 4), so no
Python package beyond the standard library and Pillow (matplotlib's) is needed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest

import einsat
from einsat.egraph import Limits
from einsat.ir import GraphBuilder

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe"]


class DevTools:
    """Chromium's DevTools protocol over `--remote-debugging-pipe`: `call` sends a command and
    returns its result; events that arrive meanwhile are kept in `events`."""

    def __init__(self, profile: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds():  # in the child: the protocol's fds 3 (commands in) and 4 (messages out), inheritable
            # (copied above 4 first: a pipe end that is fd 3 or 4 already would stay close-on-exec)
            commands, messages = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(commands, 3)
            os.dup2(messages, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe: "
                                   + self.proc.stderr.read().decode(errors="replace")[-2000:])
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for k, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(k)
            self.events.append(self._read(deadline))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self.proc.stderr.close()


def program():
    """conv -> batchnorm -> relu -> maxpool -> reshape -> gemm: both programs, the e-graph's
    growth, the cost bars and the times all have something to draw."""
    b = GraphBuilder("head")
    x = b.input("x", (1, 3, 8, 8))
    y = b.conv(x, b.weight("w", (4, 3, 3, 3)), b.weight("bias", (4,)), padding=1)
    y = b.batchnorm(y, b.weight("s", (4,)), b.weight("be", (4,)), b.weight("mu", (4,)),
                    b.weight("var", np.full(4, 2.0, np.float32)), epsilon=1e-3)
    r = b.reshape(b.maxpool(b.relu(y), kernel=(2, 2), stride=(2, 2)), shape=(1, 64))
    return b.build(b.gemm(r, b.weight("wg", (64, 5)), b.weight("bg", (5,))))


CLI_PHASES = ("read", "load", "reference", "profile", "partition", "saturate", "extract", "rebind", "stitch",
              "measure", "verify", "write")
# the texts of each top-level picture that stick out of it (clipped labels), as [picture, text, how far]
CLIPPED = """JSON.stringify([...document.querySelectorAll('svg')].filter(s => !s.parentElement.closest('svg'))
  .flatMap((s, k) => { const b = s.getBoundingClientRect();
    return [...s.querySelectorAll('text')].map(t => [k, t.textContent, t.getBoundingClientRect()])
      .filter(([, , r]) => r.width > 0)
      .map(([k, text, r]) => [k, text, Math.max(b.left - r.left, b.top - r.top,
                                                r.right - b.right, r.bottom - b.bottom)])
      .filter(([, , out]) => out > 1); }))"""
# every text of the pictures, to find the legend's labels by
TEXTS = "JSON.stringify([...document.querySelectorAll('svg text')].map(t => t.textContent))"
# the top-level pictures (an SVG inside another is part of it), in page coordinates
PICTURES = """JSON.stringify([...document.querySelectorAll('svg')].filter(s => !s.parentElement.closest('svg'))
  .map(s => { const r = s.getBoundingClientRect();
              return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; }))"""


def test_the_report_page_has_no_console_error_and_every_picture_draws(tmp_path):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's package (make test does)")
    from PIL import Image

    from einsat.cli.optimize import write_report
    result = einsat.optimize(program(), limits=Limits(nodes=2000, iterations=3, time_s=60, extract_s=2))
    # every phase a partitioned command-line run reports (its own times beside the pipeline's): the time
    # chart's legend then has three rows, as a real `einsat optimize --report` of a big model has
    result.report.times = {name: 0.25 * (k + 1) for k, name in enumerate(CLI_PHASES)} | {"total": 20.0}
    page = tmp_path / "demo-report.html"
    write_report(result, page)  # what `einsat demo --report build/demo-report.html` calls
    with tempfile.TemporaryDirectory(prefix="einsat-chromium-") as profile:
        chrome = DevTools(profile)
        try:
            target = chrome.call("Target.createTarget", url="about:blank")["targetId"]
            session = chrome.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                chrome.call(f"{domain}.enable", session)
            chrome.call("Emulation.setDeviceMetricsOverride", session, width=1400, height=900,
                        deviceScaleFactor=1, mobile=False)
            chrome.call("Page.navigate", session, url=page.as_uri())
            chrome.wait_for("Page.loadEventFired")
            boxes = json.loads(chrome.call("Runtime.evaluate", session, expression=PICTURES,
                                           returnByValue=True)["result"]["value"])
            clipped = json.loads(chrome.call("Runtime.evaluate", session, expression=CLIPPED,
                                             returnByValue=True)["result"]["value"])
            texts = json.loads(chrome.call("Runtime.evaluate", session, expression=TEXTS,
                                           returnByValue=True)["result"]["value"])
            shots = [chrome.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                                 clip={"x": x, "y": y, "width": w, "height": h, "scale": 1})["data"]
                     for x, y, w, h in boxes]
            chrome.call("Runtime.evaluate", session, expression="0")  # let late console events arrive
        finally:
            chrome.close()
    errors = [e["params"] for e in chrome.events
              if (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
              or e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    assert len(boxes) >= 5, boxes  # input, optimized, growth, cost bars, times
    # every label is drawn whole inside its picture: the time chart's legend names every phase of the run
    assert clipped == [], clipped
    for name in CLI_PHASES:
        assert any(t.startswith(f"{name} ") and t.endswith(" s") for t in texts), (name, texts)
    for (x, y, w, h), shot in zip(boxes, shots):
        assert w > 20 and h > 20, (x, y, w, h)
        image = Image.open(io.BytesIO(base64.b64decode(shot))).convert("RGB")
        colours = image.getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 1, f"the picture at {(x, y, w, h)} is blank"
        # more than a few stray pixels: at least 1% of the region is not the background
        background = max(colours)[0]
        assert image.width * image.height - background > 0.01 * image.width * image.height
