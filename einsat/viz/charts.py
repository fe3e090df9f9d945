"""Charts as inline SVG, drawn with matplotlib (imported here, when a chart is drawn).

- `growth_svg(phases)`: e-nodes after each saturation phase (the session's `PhaseStats` as
  dicts), one marker per phase, coloured by phase name;
- `cost_bars_svg(before, after, unit)`: modeled cost per op, input beside optimized;
- `times_svg(times)`: seconds per phase of `optimize` (the measured times of the run).
"""

from __future__ import annotations

import io


def _figure(width: float = 6.0, height: float = 2.8):
    import matplotlib
    matplotlib.use("Agg", force=False)  # no display needed; a notebook's inline backend also works
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig) -> str:
    import matplotlib
    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small, searchable
        fig.savefig(out, format="svg")
    text = out.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined


def growth_svg(phases: list[dict]) -> str:
    fig = _figure()
    ax = fig.subplots()
    xs = list(range(1, len(phases) + 1))
    ax.plot(xs, [p["nodes"] for p in phases], color="#868e96", linewidth=1, zorder=1)
    names = list(dict.fromkeys(p["phase"] for p in phases))
    for k, name in enumerate(names):
        pts = [(x, p["nodes"]) for x, p in zip(xs, phases) if p["phase"] == name]
        ax.scatter(*zip(*pts), s=18, label=name, color=f"C{k % 10}", zorder=2)
    ax.set_xlabel("phase")
    ax.set_ylabel("e-nodes")
    ax.set_title("e-graph growth")
    if names:
        ax.legend(fontsize=7, ncols=2 if len(names) > 6 else 1, loc="best")
    return _svg(fig)


def cost_bars_svg(before: dict[str, float], after: dict[str, float], unit: str) -> str:
    ops = sorted(set(before) | set(after), key=lambda o: -max(before.get(o, 0.0), after.get(o, 0.0)))
    fig = _figure(6.0, max(1.6, 0.32 * len(ops) + 0.9))
    ax = fig.subplots()
    ys = range(len(ops))
    ax.barh([y + 0.2 for y in ys], [before.get(o, 0.0) for o in ops], height=0.4, label="input", color="#adb5bd")
    ax.barh([y - 0.2 for y in ys], [after.get(o, 0.0) for o in ops], height=0.4, label="optimized", color="#f08c00")
    ax.set_yticks(list(ys), ops, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"modeled cost ({unit})")
    ax.set_title("cost per op")
    ax.legend(fontsize=8)
    return _svg(fig)


def times_svg(times: dict[str, float]) -> str:
    phases = [k for k in times if k != "total"]
    columns = min(4, max(1, len(phases)))
    rows = -(-len(phases) // columns)
    fig = _figure(6.0, 1.5 + 0.22 * rows)  # the legend below the bar gets a row of room per row of labels
    ax = fig.subplots()
    left = 0.0
    for k, name in enumerate(phases):
        ax.barh([0], [times[name]], left=left, color=f"C{k % 10}", label=f"{name} {times[name]:.2f} s")
        left += times[name]
    ax.set_yticks([])
    ax.set_xlabel("seconds")
    ax.set_title(f"time per phase ({times.get('total', left):.2f} s in all)")
    if phases:  # outside the axes, inside the figure: constrained layout makes room for every label
        fig.legend(fontsize=7, ncols=columns, loc="outside lower center")
    return _svg(fig)
