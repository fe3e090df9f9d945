"""The ONNX model zoo's architectures as benchmark workloads: the nine models the onnx package
ships in its backend test data (`onnx/backend/test/data/light`: opset 9, weights stripped to
`ConstantOfShape` placeholders), imported with seeded random weights (`load_onnx(...,
fill_weights="random", seed=0)`: the same graph every time). They are not in `WORKLOADS` (whose
builders the tests build at small sizes): the CPU harness runs them beside the workloads.
"""

from __future__ import annotations

import os
from functools import partial

from einsat import Graph

ZOO_MODELS = ("squeezenet", "inception_v1", "inception_v2", "shufflenet", "densenet121", "resnet50",
              "bvlc_alexnet", "zfnet512", "vgg19")
SOURCE = "ONNX model zoo (onnx backend test data, random weights)"


def zoo_path(name: str) -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def zoo_model(name: str, batch: int = 1) -> Graph:
    """The zoo model `name` with seeded random weights (batch 1 only: the files fix it)."""
    if batch != 1:
        raise ValueError(f"the zoo file of {name} fixes batch 1")
    from einsat import load_onnx
    g = load_onnx(zoo_path(name), fill_weights="random", seed=0)
    return g.replace(name=f"zoo_{name}")


def zoo_workloads(workload_type) -> dict:
    """{"zoo_<name>": Workload(...)} for every zoo model."""
    return {f"zoo_{n}": workload_type(partial(zoo_model, n), {"batch": 1}, f"ONNX zoo {n}, 224×224, random weights",
                                      SOURCE) for n in ZOO_MODELS}
