"""Structured control flow on the device: `loop` and `if_` run their body graphs with the same
lowering. The trip count and the condition are read back to the host (a synchronization), so
a program holding them is not captured as a CUDA graph."""

from __future__ import annotations

import numpy as np

from einsat.gpu.lower import implements, run_graph


def _scalar(dev, a) -> np.ndarray:
    return np.asarray(dev.download(a)).reshape(())


@implements("loop")
def loop(dev, node, args, out_types):
    k = node.attrs["n_carried"]
    body = node.attrs["body"]
    carried, captured = list(args[1:1 + k]), list(args[1 + k:])
    for i in range(int(_scalar(dev, args[0]))):
        index = dev.upload(np.asarray(i, dtype=np.int64))
        carried = run_graph(dev, body, [index, *carried, *captured])
    return carried


@implements("if_")
def if_(dev, node, args, out_types):
    branch = node.attrs["then_branch"] if bool(_scalar(dev, args[0])) else node.attrs["else_branch"]
    return run_graph(dev, branch, list(args[1:]))
