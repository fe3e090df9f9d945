"""The papers' workloads as `ir.Graph` builders, and their registry.

    from benchmarks.workloads import WORKLOADS, build
    builder, defaults, description, source = WORKLOADS["resnet18"]
    g = build("longformer", seq=1000)          # the defaults, with overrides

Every builder takes `batch` and returns a validated `einsat.Graph` with seeded weights (the same
arguments give the same graph). `defaults` are the papers' sizes at batch 1; `CPU_SIZES` holds
the overrides the CPU harness runs with where a paper's size is too big for NumPy on a small
machine (the Longformer block at a reduced sequence length, the EinNet G2BMM case likewise).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from benchmarks.workloads import (
    convnets,
    generative,
    inception,
    llm,
    nasnet,
    operators,
    resnet,
    rnn,
    segmentation,
    transformer,
)
from einsat import Graph


class Workload(NamedTuple):
    builder: Callable[..., Graph]
    defaults: dict[str, Any]
    description: str
    source: str


PET, EINNET, TASO = "PET (OSDI'21) §8", "EinNet (OSDI'23) §7", "TASO (SOSP'19) / Tensat (MLSys'21)"

WORKLOADS: dict[str, Workload] = {
    # PET's models
    "resnet18": Workload(resnet.resnet18, {"batch": 1, "image": 224},
                         "ResNet-18, 224×224, batchnorm, 1000 classes", f"{PET}; {EINNET}"),
    "csrnet": Workload(convnets.csrnet, {"batch": 1, "size": 14},
                       "CSRNet back end: six 3×3 dilation-2 convs on [N, 512, 14, 14]", f"{PET}; {EINNET}"),
    "inception_v3": Workload(inception.inception_v3, {"batch": 1, "image": 299},
                             "Inception-v3, 299×299, conv-batchnorm-ReLU, 1000 classes", f"{PET}; {TASO}"),
    "bert": Workload(transformer.bert, {"batch": 1, "seq": 512, "hidden": 768, "heads": 12, "layers": 12},
                     "BERT-base encoder on [N, 512, 768]: 12 layers, 12 heads, FFN 3072", PET),
    # EinNet's models
    "infogan": Workload(generative.infogan, {"batch": 1}, "InfoGAN generator: 5 conv transposes to 32×32",
                        EINNET),
    "dcgan": Workload(generative.dcgan, {"batch": 1}, "DCGAN generator: 5 conv transposes to 64×64", EINNET),
    "fsrcnn": Workload(generative.fsrcnn, {"batch": 1, "size": 32},
                       "FSRCNN on [N, 1, 32, 32]: 8 convs and a 9×9 conv transpose", EINNET),
    "gcn": Workload(segmentation.gcn, {"batch": 1, "image": 224},
                    "GCN (Large Kernel Matters): ResNet-18 backbone, separable 11×1/1×11 convs, "
                    "deconv decoder, 21 classes", EINNET),
    "longformer": Workload(transformer.longformer,
                           {"batch": 1, "seq": 10000, "hidden": 512, "heads": 8, "width": 1000, "dilation": 4},
                           "Longformer attention block: dilated G2BMM (window 1000, dilation 4), "
                           "softmax, GBMM, 2 linear layers", EINNET),
    # TASO's and Tensat's
    "bert_tensat": Workload(transformer.bert_tensat, {"seq": 64, "hidden": 1024, "heads": 16, "layers": 8},
                            "BERT attention layers on [64, 1024]: 16 heads, 8 layers", TASO),
    "nasrnn": Workload(rnn.nasrnn, {"batch": 1, "steps": 5, "hidden": 512},
                       "NasRNN: 5 steps, hidden 512", TASO),
    "resnext50": Workload(resnet.resnext50, {"batch": 1, "image": 224},
                          "ResNeXt-50 (32 groups), 224×224, no classifier", TASO),
    "nasnet_a": Workload(nasnet.nasnet_a, {"batch": 1, "size": 56, "channels": 128},
                         "NasNet-A: 3 stacks of 5 normal cells + a reduction cell on [N, 128, 56, 56]", TASO),
    "squeezenet": Workload(convnets.squeezenet, {"batch": 1, "image": 224},
                           "SqueezeNet 1.1: 8 fire modules, 224×224", TASO),
    "vgg19": Workload(convnets.vgg19, {"batch": 1, "image": 224},
                      "VGG-19, 224×224, with its 4096-wide classifier", TASO),
    # single operators
    "pet_conv": Workload(operators.pet_conv, {"batch": 1}, "conv [1,48,38,38] * [64,48,5,5]", "PET Table 3"),
    "pet_dilated_conv": Workload(operators.pet_dilated_conv, {"batch": 1},
                                 "dilated conv [1,512,14,14] * [256,512,3,3], dilation 2", "PET Table 3"),
    "pet_group_conv": Workload(operators.pet_group_conv, {"batch": 1},
                               "two convs [1,768,18,18] * [192|160,768,1,1]", "PET Table 3"),
    "pet_batch_matmul": Workload(operators.pet_batch_matmul, {"batch": 1},
                                 "three matmuls [512,768] @ [768,768]", "PET Table 3"),
    "einnet_conv3x3": Workload(operators.einnet_conv3x3, {"batch": 1},
                               "conv [1,512,7,7] * [512,512,3,3]", "EinNet Table 3"),
    "einnet_conv_transpose": Workload(operators.einnet_conv_transpose, {"batch": 16},
                                      "conv transpose [16,448,2,2] * [448,256,4,4], stride 2",
                                      "EinNet Table 3"),
    "einnet_conv5x5": Workload(operators.einnet_conv5x5, {"batch": 16},
                               "conv [16,32,224,224] * [1,32,5,5]", "EinNet Table 3"),
    "einnet_g2bmm": Workload(operators.einnet_g2bmm, {"batch": 8, "seq": 10000, "width": 1000, "dilation": 4},
                             "G2BMM [8,10000,64], width 1000, dilation 4", "EinNet Table 3"),
}

# The workloads people bring in 2026 (`workloads.llm`): a Llama-3-8B decoder layer (prefill, decode
# against a KV cache), a 32-layer Llama stack, Mirage's operator benchmarks, an MoE layer. Kept apart
# from WORKLOADS (whose every entry the CPU harness and the PyTorch baseline run): the 8B layer's
# weights are ~870 MB; `benchmarks.llm_bench` runs them, `llm.TEST_SIZES` are the tests' sizes.
LLM: dict[str, Workload] = llm.workloads(Workload)

# Overrides for NumPy runs on a small CPU machine (the papers' sizes need a GPU's memory and speed).
CPU_SIZES: dict[str, dict[str, Any]] = {
    "longformer": {"seq": 2000, "width": 200},
    "einnet_g2bmm": {"seq": 2000, "width": 200},
}


def zoo() -> dict[str, Workload]:
    """The ONNX model zoo's models (`workloads.zoo`) as workloads named zoo_<model>."""
    from benchmarks.workloads.zoo import zoo_workloads
    return zoo_workloads(Workload)


def build(name: str, **overrides) -> Graph:
    """The workload `name` with its default arguments, updated by `overrides`."""
    try:
        w = WORKLOADS[name] if name in WORKLOADS else LLM[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; choose from {', '.join([*WORKLOADS, *LLM])}") from None
    return w.builder(**{**w.defaults, **overrides})


__all__ = ["CPU_SIZES", "LLM", "WORKLOADS", "Workload", "build", "zoo"]
