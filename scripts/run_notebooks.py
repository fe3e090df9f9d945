"""Execute the notebooks (jupytext `.py` files) in a Jupyter kernel, into `.ipynb` with outputs.

    python scripts/run_notebooks.py [build/notebooks] [notebooks/01_rule_playground.py ...]

`make notebooks` runs it. Each notebook runs in a fresh `python3` kernel (ipykernel, from the
`notebooks` extra) with `notebooks/` as its working directory, reached over IPC (Unix sockets in a
private temporary directory: over TCP the kernel warns that its traffic is not encrypted, and any
local user could connect to it); a failing cell stops that
notebook with its traceback, and the script exits 1. The executed `.ipynb` files (pictures
included) are written to the output folder, git-ignored under `build/`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
OUT = ROOT / "build" / "notebooks"
TIMEOUT_S = 600  # per cell


def execute(path: Path, out_dir: Path = OUT):
    """Run the notebook at `path` in a kernel; the executed notebook (also written to `out_dir`)."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    nb = jupytext.read(path)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    try:
        with tempfile.TemporaryDirectory(prefix="einsat-kernel-") as sockets:  # mode 0700: this user's
            ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
            client = NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", config=ipc,
                                    resources={"metadata": {"path": str(path.parent)}})
            client.execute()
    finally:
        out_dir.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out_dir / (path.stem + ".ipynb"))
    return nb


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else OUT
    paths = [Path(a) for a in argv[1:]] or NOTEBOOKS
    failed = []
    for path in paths:
        start = time.perf_counter()
        try:
            execute(path, out_dir)
            print(f"{path.name}: ran in {time.perf_counter() - start:.1f} s -> {out_dir / (path.stem + '.ipynb')}")
        except Exception as e:  # a failing cell: report it and go on with the others
            failed.append(path.name)
            print(f"{path.name}: FAILED\n{e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
