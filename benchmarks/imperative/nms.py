"""Non-maximum suppression: a soft-NMS score-update loop and a greedy keep mask.

`soft_nms` decays, for each box i in score order, the scores of the later boxes overlapping it
(linear soft-NMS), as one structured loop over i whose body updates `scores` in place.
`nms_keep` is greedy NMS with a Python loop (unrolled while tracing) that suppresses through a
boolean mask: `keep[suppress] = False`.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import loop


def pairwise_iou(a, b):
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.maximum(rb - lt, 0)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def soft_nms(boxes, scores, iou_threshold=0.3):
    """boxes [K, 4] sorted by decreasing score, scores [K] -> decayed scores [K]."""
    scores = scores.copy()
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    order = np.arange(len(scores))

    def body(i):
        w = np.maximum(np.minimum(x2[i], x2) - np.maximum(x1[i], x1), 0)
        h = np.maximum(np.minimum(y2[i], y2) - np.maximum(y1[i], y1), 0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        scores[...] *= np.where((order > i) & (iou > iou_threshold), 1 - iou, 1)

    loop(len(scores), body)
    return scores


def nms_keep(boxes, scores, iou_threshold=0.5):
    """Greedy NMS over boxes sorted by decreasing score: the keep mask [K]."""
    iou = pairwise_iou(boxes, boxes)
    keep = np.ones_like(scores, dtype=bool)
    for i in range(len(scores)):
        suppress = (iou[i] > iou_threshold) & keep[i]
        suppress[:i + 1] = False
        keep[suppress] = False
    return keep


def _sorted_boxes(rng, k):
    xy = rng.uniform(0, 20, (k, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 10, (k, 2))], 1).astype(np.float32)
    scores = np.sort(rng.uniform(0, 1, k).astype(np.float32))[::-1].copy()
    return boxes, scores


def soft_nms_inputs(rng):
    return _sorted_boxes(rng, 24)


def nms_inputs(rng):
    return _sorted_boxes(rng, 12)
