"""Imperative kernels of the kinds TensorSSA measures (DAC'24 §5), in NumPy style.

Each runs unchanged on `np.ndarray` (the oracle) and functionalizes with
`einsat.functionalize(fn, inputs)`. `KERNELS[name] = (fn, make_inputs(rng), description)`;
`make_inputs` returns the positional arguments (arrays, then fixed Python values).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from benchmarks.imperative import attention, detection, nms, paper, sequence


class Kernel(NamedTuple):
    fn: Callable
    inputs: Callable
    description: str


KERNELS: dict[str, Kernel] = {
    "figure2": Kernel(paper.figure2, paper.figure2_inputs,
                      "TensorSSA Fig. 2: whole and partial updates inside both branches of an if"),
    "figure4": Kernel(paper.figure4, paper.figure4_inputs,
                      "TensorSSA Fig. 4: b[i] = b[i] + 1 in a loop on a tensor trip count"),
    "yolo_decode": Kernel(detection.yolo_decode, detection.yolo_inputs,
                          "YOLOv3 box decoding: in-place sigmoid/exp through slices of the prediction"),
    "ssd_encode": Kernel(detection.ssd_encode, detection.ssd_inputs,
                         "SSD box encoding into a preallocated target, out= through views"),
    "fcos_decode": Kernel(detection.fcos_decode, detection.fcos_inputs,
                          "FCOS box decoding, clamp_ through strided views, masked score zeroing"),
    "yolact_normalize": Kernel(detection.yolact_normalize, detection.yolact_inputs,
                               "YOLACT input normalization per channel through a transposed view"),
    "soft_nms": Kernel(nms.soft_nms, nms.soft_nms_inputs,
                       "soft-NMS score-update loop (structured loop, scores updated in place)"),
    "nms_keep": Kernel(nms.nms_keep, nms.nms_inputs,
                       "greedy NMS keep mask: unrolled loop, boolean-mask suppression"),
    "lstm": Kernel(sequence.lstm, sequence.lstm_inputs,
                   "LSTM loop, in-place gate activations, out[t] = h into a preallocated output"),
    "seq2seq": Kernel(sequence.seq2seq, sequence.seq2seq_inputs,
                      "greedy GRU decoder loop writing logits and tokens per step"),
    "attention": Kernel(attention.masked_attention, attention.attention_inputs,
                        "attention with in-place causal masking and in-place softmax"),
}
