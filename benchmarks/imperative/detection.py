"""Detection post-processing written the way model zoos write it: in place, through views.

YOLOv3's decoding (ultralytics `YOLOLayer`), SSD's box encoding (`box_utils.encode`), FCOS's box
decoding with `clamp_` to the image, and YOLACT's `FastBaseTransform` input normalization.
"""

from __future__ import annotations

import numpy as np


def sigmoid_(x):
    """x := 1 / (1 + e^-x), in place (x may be a view)."""
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1
    np.reciprocal(x, out=x)
    return x


def yolo_decode(p, anchors, stride=8):
    """p [B, A, H, W, 5 + C] raw predictions, anchors [A, 2] in pixels -> boxes [B, A·H·W, 5 + C]."""
    bs, na, ny, nx, no = p.shape
    io = p.copy()
    gy, gx = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    grid = np.stack((gx, gy), -1).reshape(1, 1, ny, nx, 2).astype(p.dtype)
    xy = io[..., :2]
    sigmoid_(xy)
    xy += grid
    wh = io[..., 2:4]
    np.exp(wh, out=wh)
    wh *= anchors.reshape(1, na, 1, 1, 2) / stride
    io[..., :4] *= stride
    sigmoid_(io[..., 4:])
    return io.reshape(bs, -1, no)


def ssd_encode(matched, priors, variances=(0.1, 0.2)):
    """matched [P, 4] corner boxes, priors [P, 4] center-size -> SSD regression targets [P, 4]."""
    out = np.empty_like(matched)
    g = out[:, :2]
    g[...] = (matched[:, :2] + matched[:, 2:]) / 2
    g -= priors[:, :2]
    g /= variances[0] * priors[:, 2:]
    wh = out[:, 2:]
    np.subtract(matched[:, 2:], matched[:, :2], out=wh)
    wh /= priors[:, 2:]
    np.log(wh, out=wh)
    wh /= variances[1]
    return out


def fcos_decode(locations, reg, centerness, logits, image_size=(64, 80)):
    """FCOS: distances (l, t, r, b) from each location -> boxes clipped to the image, and scores
    sqrt(sigmoid(cls) · sigmoid(centerness)) with the low ones zeroed."""
    h, w = image_size
    boxes = np.empty_like(reg)
    boxes[:, 0] = locations[:, 0] - reg[:, 0]
    boxes[:, 1] = locations[:, 1] - reg[:, 1]
    boxes[:, 2] = locations[:, 0] + reg[:, 2]
    boxes[:, 3] = locations[:, 1] + reg[:, 3]
    np.clip(boxes[:, 0::2], 0, w - 1, out=boxes[:, 0::2])
    np.clip(boxes[:, 1::2], 0, h - 1, out=boxes[:, 1::2])
    scores = sigmoid_(logits.copy())
    scores *= sigmoid_(centerness.copy())
    np.sqrt(scores, out=scores)
    scores[scores < 0.05] = 0
    return boxes, scores


def yolact_normalize(img, mean, std):
    """img [N, H, W, 3] BGR -> float [N, 3, H, W] RGB, (x - mean) / std per channel, in place."""
    x = img.astype(np.float32).transpose(0, 3, 1, 2)
    for c in range(3):
        x[:, c] -= mean[c]
        x[:, c] /= std[c]
    return x[:, ::-1].copy()


def yolo_inputs(rng):
    return (rng.standard_normal((2, 3, 8, 8, 9)).astype(np.float32),
            np.array([[10, 13], [16, 30], [33, 23]], np.float32))


def ssd_inputs(rng):
    xy = rng.uniform(0, 1, (64, 2)).astype(np.float32)
    wh = rng.uniform(0.05, 0.5, (64, 2)).astype(np.float32)
    priors = np.concatenate([rng.uniform(0, 1, (64, 2)), rng.uniform(0.1, 0.4, (64, 2))], 1)
    return np.concatenate([xy, xy + wh], 1), priors.astype(np.float32)


def fcos_inputs(rng):
    n = 128
    loc = np.stack([rng.uniform(0, 80, n), rng.uniform(0, 64, n)], 1).astype(np.float32)
    return (loc, rng.uniform(0, 40, (n, 4)).astype(np.float32),
            rng.standard_normal((n, 1)).astype(np.float32), rng.standard_normal((n, 6)).astype(np.float32))


def yolact_inputs(rng):
    return (rng.integers(0, 256, (2, 16, 16, 3)).astype(np.uint8),
            np.array([103.94, 116.78, 123.68], np.float32), np.array([57.38, 57.12, 58.40], np.float32))
