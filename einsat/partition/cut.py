"""Where to cut a program into pieces, and the pieces as programs of their own.

A *boundary* lies between two consecutive nodes of the program's topological order; the values
*crossing* it are those produced before it and used after it (graph inputs and weights are not:
every piece reads them directly). A boundary is a *cut candidate* (PET §6.1: split where little
is lost) when at most `max_crossing` values cross it and each of them either comes from an op
that is not multi-linear (PET's mutations work on multi-linear subprograms, so none is torn
apart) or has more than one use (it is materialized for its other users anyway).

`atoms` are the runs of nodes between consecutive candidates; `group` joins atoms into pieces:
a run of atoms that repeats (the same structural fingerprint, `partition.fingerprint`, twice or
more in a row) becomes one piece per repetition, so every copy of a repeated layer is the same
piece up to names and weights; the other atoms are joined into pieces of at most `piece_nodes`
nodes. A run longer than that with no candidate inside is cut at its boundary with the fewest
crossing values (a *forced* cut, reported as such).

`align` then cuts a copy of a repeated unit off the piece next to its repetitions when that
piece starts (or ends) with one: the last layer of a pre-norm transformer (GPT-2) ends in a
residual `Add` that only the final norm reads, so no candidate boundary separates the two and
the grouping sees "last layer + final norm" as a different piece, optimized on its own (a
larger e-graph than a layer's) instead of reusing the layer's result. Such a cut is a *repeat*
cut: it lies where the repetitions are cut anyway (the same boundary one layer earlier is a
candidate), though it is not a candidate itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from einsat.ir.graph import Graph


@dataclass(frozen=True)
class Cut:
    """A boundary the partition cuts at: after node `after` (index in the topological order)."""

    after: int
    node: str                  # the name of the last node before the cut
    values: tuple[str, ...]    # the values crossing it
    producers: tuple[str, ...]  # their producers' ops
    bytes: int                 # the crossing values' size: written before the cut, read after it
    forced: bool = False       # no candidate boundary in a run longer than the piece size
    repeat: bool = False       # not a candidate: a copy of a repeated unit ends (or starts) here (`align`)


@dataclass(frozen=True)
class Piece:
    """Nodes `start` to `stop` (exclusive) of the program, as a program of their own: its inputs
    are the values it reads from outside (in order of first use), its weights those it uses, its
    outputs the values used after it or by the program's outputs (in order of production)."""

    index: int
    start: int
    stop: int
    graph: Graph


def crossings(graph: Graph) -> list[tuple[str, ...]]:
    """For each boundary k (after node k, for k < len(nodes) - 1), the values crossing it: made
    before it and read after it. A graph output no later node reads crosses nothing: the piece
    that makes it writes it out as the program would (a decoder's KV cache, `present.<layer>.key`,
    made in every layer, crossed every later boundary and left no cut candidate inside a layer)."""
    nodes = graph.nodes
    last: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for i in node.inputs:
            if i:
                last[i] = k
    live: dict[str, None] = {}
    out = []
    for k, node in enumerate(nodes[:-1]):
        for v in node.outputs:
            if last.get(v, -1) > k:
                live[v] = None
        for v in [v for v in live if last[v] <= k]:
            del live[v]
        out.append(tuple(live))
    return out


def candidates(graph: Graph, crossing: list[tuple[str, ...]], max_crossing: int) -> list[bool]:
    """Whether each boundary is a cut candidate (see the module docstring)."""
    uses: dict[str, int] = {}
    for node in graph.nodes:
        for i in node.inputs:
            if i:
                uses[i] = uses.get(i, 0) + 1

    def harmless(value: str) -> bool:
        node = graph.producer(value)
        return uses.get(value, 0) > 1 or not node.definition.is_multilinear(node.attrs)

    return [len(c) <= max_crossing and all(harmless(v) for v in c) for c in crossing]


def atoms(graph: Graph, ok: list[bool], crossing: list[tuple[str, ...]],
          piece_nodes: int) -> tuple[list[tuple[int, int]], set[int]]:
    """The runs of nodes between candidate boundaries, as (start, stop); a run longer than
    `piece_nodes` is cut at its boundaries with the fewest crossing values. Also the boundaries
    cut that way (forced)."""
    n = len(graph.nodes)
    bounds = [k for k, good in enumerate(ok) if good]
    forced: set[int] = set()
    edges = [-1] + bounds + [n - 1]
    out: list[tuple[int, int]] = []
    for a, b in zip(edges, edges[1:]):
        start, stop = a + 1, b + 1
        while stop - start > piece_nodes:
            window = range(start + piece_nodes // 2 - 1, min(stop - 1, start + piece_nodes) - 1)
            k = min(window, key=lambda j: (len(crossing[j]), -j))
            forced.add(k)
            out.append((start, k + 1))
            start = k + 1
        out.append((start, stop))
    return out, forced


MAX_UNIT_PIECES = 4  # a repeated unit may span this many pieces' worth of nodes (each copy then cut alike)


def group(spans: list[tuple[int, int]], keys: list[str], piece_nodes: int, min_unit: int) -> list[tuple[int, int]]:
    """Atoms (spans with their fingerprints `keys`) joined into pieces, as node ranges: the
    longest run of repeating atoms starting at each position (its unit of at least `min_unit`
    and at most `MAX_UNIT_PIECES * piece_nodes` nodes, the shortest unit when several cover as
    much) becomes one piece per repetition, or, for a unit of more than `piece_nodes` nodes (a
    Llama layer of 69 nodes at the default 64), the same few pieces per repetition, cut at the
    same atoms of each copy, so that every copy's pieces match the first copy's and are reused;
    the atoms in between are joined up to `piece_nodes` nodes."""
    size = [b - a for a, b in spans]
    n = len(spans)
    pieces: list[tuple[int, int]] = []
    pending: list[int] = []

    def flush():
        start = None
        for i in pending:
            if start is not None and spans[i][1] - spans[start][0] > piece_nodes:
                pieces.append((spans[start][0], spans[i - 1][1]))
                start = None
            if start is None:
                start = i
        if start is not None:
            pieces.append((spans[start][0], spans[pending[-1]][1]))
        pending.clear()

    i = 0
    while i < n:
        best = None  # (covered atoms, unit length in atoms)
        nodes = 0
        for k in range(1, (n - i) // 2 + 1):
            nodes += size[i + k - 1]
            if nodes > MAX_UNIT_PIECES * piece_nodes:
                break
            if nodes < min_unit:
                continue
            unit = keys[i:i + k]
            r = 1
            while keys[i + r * k:i + (r + 1) * k] == unit:
                r += 1
            if r >= 2 and (best is None or r * k > best[0]):
                best = (r * k, k)
        if best is None:
            pending.append(i)
            i += 1
            continue
        flush()
        covered, k = best
        chunks = _chunks(size[i:i + k], piece_nodes)  # the unit's atoms cut alike in every copy
        for j in range(i, i + covered, k):
            for a, b in chunks:
                pieces.append((spans[j + a][0], spans[j + b - 1][1]))
        i += covered
    flush()
    return pieces


def _chunks(sizes: list[int], piece_nodes: int) -> list[tuple[int, int]]:
    """A unit's atoms (their node counts) joined in order into runs of at most `piece_nodes`
    nodes (an atom larger than that alone), as (first atom, stop) within the unit: the fewest
    runs, and of those the ones whose largest run is smallest (a 69-node layer whose attention
    atom has 42 nodes is cut 11 + 58, not 11 + 42 + 16)."""
    def runs(cap: int) -> list[tuple[int, int]]:
        out, start, nodes = [], 0, 0
        for k, s in enumerate(sizes):
            if nodes and nodes + s > cap:
                out.append((start, k))
                start, nodes = k, 0
            nodes += s
        out.append((start, len(sizes)))
        return out

    lo, hi = max(sizes), max(max(sizes), piece_nodes)
    fewest = len(runs(hi))
    while lo < hi:  # the smallest cap that still needs no more runs
        mid = (lo + hi) // 2
        if len(runs(mid)) <= fewest:
            hi = mid
        else:
            lo = mid + 1
    return runs(lo)


def align(graph: Graph, ranges: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], set[int]]:
    """`ranges` (pieces as node ranges, from `group`) with a copy of a repeated piece cut off the
    start or the end of a neighbouring piece that is longer than it and begins or ends with it
    (the same fingerprint, `partition.fingerprint`); repeated until nothing changes. Also the
    boundaries cut that way (see the module docstring)."""
    from einsat.partition.fingerprint import canonical

    ranges = list(ranges)
    made: set[int] = set()
    changed = True
    while changed:
        changed = False
        keys = [canonical(subgraph(graph, a, b, "piece")).key for a, b in ranges]
        repeated = {k: b - a for k, (a, b) in zip(keys, ranges) if keys.count(k) > 1}
        for i, (a, b) in enumerate(ranges):
            if keys[i] in repeated:
                continue
            for start, key in _copies(keys, i, repeated):
                unit = repeated[key]
                if start and a - 1 in made and b - a <= unit and i + 1 < len(ranges) \
                        and keys[i + 1] not in repeated and ranges[i + 1][1] - a > unit:
                    # after a copy cut here, the next copy runs on into the next piece, itself no
                    # copy: the two pieces are cut again
                    at, end = a + unit, ranges[i + 1][1]
                    if canonical(subgraph(graph, a, at, "piece")).key == key:
                        ranges[i:i + 2] = [(a, at), (at, end)]
                        made.add(at - 1)
                        changed = True
                        break
                if b - a <= unit:
                    continue
                at = a + unit if start else b - unit  # the copy starts this piece after a repetition, or ends it
                part = (a, at) if start else (at, b)
                if canonical(subgraph(graph, *part, "piece")).key == key:
                    ranges[i:i + 1] = [(a, at), (at, b)]
                    made.add(at - 1)
                    changed = True
                    break
            if changed:
                break
    return ranges, made


def _copies(keys: list[str], i: int, repeated: dict[str, int]) -> list[tuple[bool, str]]:
    """The repeated pieces piece `i` may start (True) or end (False) with: its neighbours' own
    fingerprints, then the pieces that follow its left neighbour's (precede its right
    neighbour's) other copies, where the repetition continues into piece `i`. A 4-layer legacy
    Llama export's last layer ran on into the final norm, one piece of 63 nodes after three
    layers cut 53 + 16: its first 53 nodes are the layer's first piece, which follows the 16-node
    piece everywhere else."""
    out = []
    if i > 0 and keys[i - 1] in repeated:
        out.append((True, keys[i - 1]))
    if i + 1 < len(keys) and keys[i + 1] in repeated:
        out.append((False, keys[i + 1]))
    if i > 0 and keys[i - 1] in repeated:
        out += [(True, keys[p + 1]) for p in range(i - 1) if keys[p] == keys[i - 1] and keys[p + 1] in repeated
                and keys[p + 1] != keys[i - 1]][:1]
    if i + 1 < len(keys) and keys[i + 1] in repeated:
        out += [(False, keys[q - 1]) for q in range(len(keys) - 1, i + 1, -1) if keys[q] == keys[i + 1]
                and keys[q - 1] in repeated and keys[q - 1] != keys[i + 1]][:1]
    return out


def subgraph(graph: Graph, start: int, stop: int, name: str) -> Graph:
    """Nodes `start`..`stop` of `graph` as a program (see `Piece`)."""
    nodes = graph.nodes[start:stop]
    made = {o for node in nodes for o in node.outputs}
    inputs: dict[str, None] = {}
    weights: dict[str, None] = {}
    for node in nodes:
        for i in node.inputs:
            if i and i not in made:
                (weights if i in graph.weights else inputs)[i] = None
    later = {i for node in graph.nodes[stop:] for i in node.inputs if i} | set(graph.outputs)
    outputs = [o for node in nodes for o in node.outputs if o in later]
    return Graph(nodes, {i: graph.types[i] for i in inputs}, outputs, {w: graph.weights[w] for w in weights}, name)


def cut_at(graph: Graph, boundary: int, crossing: list[tuple[str, ...]], forced: bool, repeat: bool = False) -> Cut:
    values = crossing[boundary]
    return Cut(boundary, graph.nodes[boundary].name, values,
               tuple(graph.producer(v).op_name for v in values),
               sum(graph.types[v].nbytes for v in values), forced, repeat)
