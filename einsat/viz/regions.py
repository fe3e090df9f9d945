"""PET's corrector's findings drawn on each output's grid: the regions where a mutant differs
from the original program, as red boxes over the output's last two dimensions.

    svg = differences_svg(find_differences(original, mutant))   # `Differences._repr_svg_`

An output of rank > 2 is drawn as its last two dims (rows, columns), every region projected
on them, and the leading dims named in the caption; rank 1 is one row. The grid is scaled to
at most `SIZE` pixels a side.
"""

from __future__ import annotations

from einsat.viz.svg import document, rect, text

SIZE, PAD, CAPTION = 220, 14, 30


def differences_svg(diffs) -> str:
    panels = []
    for name, shape in diffs.shapes.items():
        panels.append(_panel(name, tuple(shape), diffs.regions.get(name, []), diffs.method.get(name, "")))
    width = sum(w for w, _, _ in panels) + PAD * (len(panels) + 1)
    height = max(h for _, h, _ in panels) + 2 * PAD
    body, x = [], PAD
    for w, h, parts in panels:
        body.append(f"<g transform='translate({x:.1f},{PAD})'>" + "".join(parts) + "</g>")
        x += w + PAD
    return document(max(width, 160), height, body)


def _panel(name: str, shape: tuple[int, ...], regions, method: str):
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0] if shape else 1)
    scale = SIZE / max(rows, cols, 1)
    w, h = max(cols * scale, 40), max(rows * scale, 12)
    parts = [rect(0, CAPTION, w, h, fill="#e7f5ff", stroke="#555", rx=0)]
    for r in regions:
        if len(shape) >= 2:
            (r0, c0), (r1, c1) = r.starts[-2:], r.ends[-2:]
        else:
            r0, r1 = 0, 1
            c0, c1 = (r.starts[0], r.ends[0]) if shape else (0, 1)
        parts.append(rect(c0 * scale, CAPTION + r0 * scale, max((c1 - c0) * scale, 1), max((r1 - r0) * scale, 1),
                          fill="#ff6b6b", stroke="#c92a2a", rx=0, title=str(r)))
    lead = f" (last 2 of {list(shape)})" if len(shape) > 2 else ""
    verdict = f"{len(regions)} region(s) differ" if regions else "equivalent"
    parts.append(text(0, 12, f"{name} {list(shape[-2:])}{lead}", 11, anchor="start", bold=True))
    parts.append(text(0, 25, f"{verdict}{' · ' + method if method else ''}", 10, anchor="start", fill="#555"))
    return w, CAPTION + h, parts
