"""PET's mutation corrector, steps 1 and 2 (§5.2): where do two multi-linear programs differ?

`find_differences(original, mutant)` propagates boxes through both programs, intersects them
output by output, and tests each intersection at a few positions over the field mod p = 2^31−1
with `tests` random inputs shared by all boxes. The result lists, per output, the regions where
the programs differ; `correction.correct` turns them into a corrected mutant (step 3).

Boxes live in digit views (`boxviews.py`): an output whose rows were reordered by parity has the
box "even rows 2..52" rather than one box per row, and Theorem 1 holds in the digit coordinates
(the box is an ordinary box of the output reshaped to its digits), so its positions are taken
there. Positions of all boxes of all outputs go to one position-restricted evaluation of each
program (`evaluate_at`). Failing digit cells are reported on the plain grid of split points
(each of its cells lies inside one digit cell) and merged into regions (`merge_cells`).

Positions tested per box: Theorem 1's m+1 positions v0, v0+e_1, ..., v0+e_m at the box's low
corner, and the same m+1 mirrored at its high corner. Theorem 1's lemma assumes both programs
read their inputs at the same rate inside a box; two programs whose reads move at different rates
(a stride-2 read against a reversed one, say) can agree at the m+1 low positions yet differ
further in; the mirrored positions catch those (see tests/verify/test_corrector.py).

Theorem 2: a position where the programs differ as polynomials of total degree ≤ d agrees on one
random input with probability ≤ d/p (Schwartz–Zippel), on all t tests with probability ≤ (d/p)^t:
`Differences.error_bound`. (PET states n/p for n inputs; the degree is the sharper count.)

What is a variable: the graph inputs, and every weight that is not a single repeated value, by
content (the same array in both programs is the same variable). A mutant weight with the name
and shape of an original weight but other content is that variable plus an exact constant delta,
so a changed element is found where it is read. Weights that are one repeated value (zeros,
ones, scalars) are exact constants, and so are weights read as indices, divisors or batchnorm
parameters. A batchnorm is the affine map x·A[c] + B[c] whose A[c], B[c] are variables keyed by
channel c's parameter values, so that a batchnorm restricted to some channels is recognized.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field

import numpy as np

from einsat.errors import ShapeError, VerificationError
from einsat.ir.graph import Graph
from einsat.ir.types import is_float
from einsat.verify import boxes, boxviews
from einsat.verify.field import NotMultilinearError, P, Source, embed, mix_key
from einsat.verify.field.evaluate import FieldEnv, degrees, evaluate, evaluate_at
from einsat.verify.regions import Region, cover_mask, mask_of, merge_cells
from einsat.verify.splits import cells, count_cells, none, uniform_splits

MAX_BOXES = 20_000    # box intersections per output before falling back to testing every position
MAX_DELTA_BOXES = 4096  # a changed weight is W + delta when delta's boxes are this few (or few per element)
MAX_DENSE = 1 << 24     # elements of an output tested one by one at most


@dataclass
class Differences:
    """Where `mutant` differs from `original`, output by output (the original's output names)."""

    regions: dict[str, list[Region]]
    shapes: dict[str, tuple[int, ...]]
    boxes: dict[str, int]
    method: dict[str, str]
    positions: int
    tests: int
    degree: int
    notes: list[str] = field(default_factory=list)

    @property
    def equivalent(self) -> bool:
        return not any(self.regions.values())

    @property
    def error_bound(self) -> float:
        """Probability bound that one differing position passes all tests: (d/p)^t."""
        return (self.degree / P) ** self.tests if self.degree else 0.0

    def mask(self, output: str) -> np.ndarray:
        return mask_of(self.regions[output], self.shapes[output])

    def _repr_svg_(self) -> str:
        """The regions drawn on each output's grid (by `einsat.viz.regions`, registered from above:
        `einsat.ir.display`)."""
        from einsat.ir.display import draw
        return draw("regions", self)

    def __str__(self) -> str:
        head = (f"{'equivalent' if self.equivalent else 'not equivalent'}: {self.positions} positions "
                f"in {sum(self.boxes.values())} boxes, {self.tests} tests, degree {self.degree}, "
                f"error bound {self.error_bound:.2e}")
        lines = [head]
        for out, regs in self.regions.items():
            shown = ", ".join(map(str, regs[:8])) + (f", ... ({len(regs)} regions)" if len(regs) > 8 else "")
            lines.append(f"  {out} {list(self.shapes[out])} [{self.method[out]}]: {shown or 'no difference'}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def content_key(array: np.ndarray) -> int:
    """A 64-bit hash of an array's dtype, shape and values. An array whose values cannot change
    (read-only and owning its memory: a Graph's frozen weights) is hashed once: PET's rounds
    key the same weights many times over (memos, bindings, sources). This relies on einsat's
    freezing convention (`ir.graph._frozen`: weights are never made writeable again)."""
    fixed = isinstance(array, np.ndarray) and not array.flags.writeable and array.flags.owndata
    if fixed:
        hit = _KEYS.get(id(array))
        if hit is not None and hit[0]() is array:
            return hit[1]
    a = np.ascontiguousarray(array)
    h = hashlib.blake2b(a.tobytes() + str((a.shape, a.dtype.str)).encode(), digest_size=8)
    key = int.from_bytes(h.digest(), "little")
    if fixed:
        ident = id(array)

        def forget(ref, ident=ident):
            if _KEYS.get(ident, (None,))[0] is ref:
                del _KEYS[ident]
        _KEYS[ident] = (weakref.ref(array, forget), key)
    return key


_KEYS: dict[int, tuple[weakref.ref, int]] = {}  # id -> (the array, its key), for arrays that cannot change


def _uniform(a: np.ndarray) -> bool:
    return a.size <= 1 or bool(np.all(a == a.reshape(-1)[0]))




def constant_weights(graph: Graph) -> set[str]:
    """Weights that reach a constant slot (through layout ops): they must stay exact constants."""
    out: set[str] = set()
    # inputs read as constants (indices, divisors, normalization parameters): the registry's parameter_inputs
    stack = [n.inputs[k] for n in graph.nodes for k in n.definition.parameter_inputs if k < len(n.inputs)]
    while stack:
        v = stack.pop()
        if v in graph.weights:
            out.add(v)
        node = graph.producer(v)
        if node is not None and node.definition.layout_only:
            stack.extend(i for i in node.inputs if i)
    return out


def assign_sources(original: Graph, mutant: Graph, seed: int = 0):
    """The shared variables of the pair: (env_original, env_mutant, splits, notes)."""
    notes: list[str] = []
    draws: dict = {}  # the same random inputs, drawn once for both programs
    envs = tuple(FieldEnv(batchnorm_key=mix_key(seed, 3), draws=draws) for _ in range(2))
    splits: tuple[dict, dict] = ({}, {})
    for name in original.inputs:
        key = mix_key(seed, 1, content_key(np.frombuffer(name.encode(), np.uint8)))
        for env in envs:
            env.sources[name] = Source(key=key)
    known = {content_key(a) for a in original.weights.values()}
    for k, g in enumerate((original, mutant)):
        fixed = constant_weights(g)
        for name, value in g.weights.items():
            value = np.asarray(value)
            if name in fixed or _uniform(value) or not is_float(value.dtype):
                continue  # an exact constant (split by its values)
            key = content_key(value)
            if k == 1 and key not in known:
                base = original.weights.get(name)
                delta = None if base is None or base.shape != value.shape else \
                    np.mod(embed(value) - embed(base), P)
                dsplits = uniform_splits(delta) if delta is not None else None
                if dsplits is not None and count_cells(dsplits) <= max(MAX_DELTA_BOXES, value.size // 4):
                    envs[1].sources[name] = Source(key=mix_key(seed, 2, content_key(base)), const=delta)
                    splits[1][name] = dsplits
                    continue
                notes.append(f"mutant weight {name!r} {list(value.shape)} matches no original weight: "
                             "treated as an unknown")
            envs[k].sources[name] = Source(key=mix_key(seed, 2, key))
            splits[k][name] = none(value.shape)
    return envs[0], envs[1], splits, notes


def _positions(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Theorem 1's positions per box, at both corners: (N, rank) positions and their box index."""
    b, m = lo.shape
    if m == 0:
        return np.zeros((b, 0), np.int64), np.arange(b)
    cand = [lo, hi - 1]
    for i in range(m):
        e = np.zeros(m, np.int64)
        e[i] = 1
        cand.append(np.minimum(lo + e, hi - 1))
        cand.append(np.maximum(hi - 1 - e, lo))
    pos = np.stack(cand, axis=1)                  # (B, 2m+2, m)
    owner = np.repeat(np.arange(b), pos.shape[1])
    pos = pos.reshape(-1, m)
    uniq = np.unique(np.column_stack([owner, pos]), axis=0)
    return uniq[:, 1:], uniq[:, 0]


def check_pair(original: Graph, mutant: Graph) -> list[tuple[str, str]]:
    """The outputs paired by position; raises ShapeError when the programs do not fit."""
    if original.input_types() != mutant.input_types():
        raise ShapeError(f"graphs {original.name!r} and {mutant.name!r} take different inputs: "
                         f"{original.input_types()} and {mutant.input_types()}")
    if len(original.outputs) != len(mutant.outputs):
        raise ShapeError(f"graph {original.name!r} has {len(original.outputs)} outputs, "
                         f"{mutant.name!r} has {len(mutant.outputs)}")
    for a, b in zip(original.outputs, mutant.outputs):
        if original.types[a].shape != mutant.types[b].shape:
            raise ShapeError(f"output {a!r} {original.types[a]} and mutant output {b!r} "
                             f"{mutant.types[b]} differ in shape")
    return list(zip(original.outputs, mutant.outputs))


# what a NotMultilinearError out of find_differences adds to the node it names
MULTILINEAR_ONLY = ("find_differences and correct take multi-linear programs only (PET corrects a model's "
                    "multi-linear parts: convolutions, matmuls, sums, layout changes); "
                    "einsat.verify.equivalent(original, mutant) checks any two programs on random inputs")


def find_differences(original: Graph, mutant: Graph, *, tests: int = 2, seed: int = 0,
                     max_boxes: int = MAX_BOXES) -> Differences:
    """The output regions where `mutant` differs from `original` (both multi-linear programs).

    A program with an op that has no exact meaning over the field (relu, tanh, exp, a division by a
    computed value) raises `NotMultilinearError` naming the graphs and the node."""
    try:
        return _find_differences(original, mutant, tests, seed, max_boxes)
    except NotMultilinearError as e:
        if MULTILINEAR_ONLY in str(e):  # said by a find_differences further in
            raise
        raise NotMultilinearError(f"find_differences({original.name!r}, {mutant.name!r}): {e}. "
                                  f"{MULTILINEAR_ONLY}") from None


def _find_differences(original: Graph, mutant: Graph, tests: int, seed: int, max_boxes: int) -> Differences:
    pairs = check_pair(original, mutant)
    env1, env2, src_splits, notes = assign_sources(original, mutant, seed)
    env1.tests = env2.tests = tests
    g1 = boxes.propagate_grids(original, src_splits[0], env1)
    g2 = boxes.propagate_grids(mutant, src_splits[1], env2)
    d1, d2 = degrees(original, env1), degrees(mutant, env2)
    degree = max([d1[a] for a, _ in pairs] + [d2[b] for _, b in pairs] + [0])
    regions, shapes, nboxes, method = {}, {}, {}, {}
    want1, want2, owners, grids, dense = {}, {}, {}, {}, []
    for a, b in pairs:
        shape = original.types[a].shape
        shapes[a] = shape
        grid = boxviews.meet(g1[a], g2[b])
        nboxes[a] = boxviews.count(grid)
        if nboxes[a] > max_boxes or 0 in shape:
            dense.append((a, b))
            method[a] = "every position"
            continue
        method[a] = "boxes"
        lo, hi = cells(grid.splits, grid.digits)
        pos, owner = _positions(lo, hi)
        flat = np.ravel_multi_index(tuple(pos.T), grid.digits) if grid.digits else np.zeros(len(pos), np.int64)
        want1[a], want2[b], owners[a], grids[a] = flat, flat, owner, grid
    count = 0
    if want1:
        v1 = evaluate_at(original, env1, want1)
        v2 = evaluate_at(mutant, env2, want2)
        for a, b in pairs:
            if a not in want1:
                continue
            count += len(want1[a])
            bad = np.any(v1[a] != v2[b], axis=0)
            regions[a] = report(grids[a], np.unique(owners[a][bad]))
    for a, b in dense:
        size = int(np.prod(shapes[a]))
        if size > MAX_DENSE:
            raise VerificationError(f"output {a!r} {list(shapes[a])}: {nboxes[a]} box intersections "
                                    f"(more than max_boxes={max_boxes}) and {size} elements to test one by "
                                    "one; raise max_boxes or split the program")
        f1 = evaluate(original, env1, [a])[a]
        f2 = evaluate(mutant, env2, [b])[b]
        count += f1[0].size
        regions[a] = cover_mask(np.any(f1 != f2, axis=0))
    return Differences({a: regions[a] for a, _ in pairs}, shapes, nboxes, method, count, tests, degree, notes)


def report(grid, failing: np.ndarray) -> list[Region]:
    """Regions covering the failing cells (indices into `grid`'s digit cells): the cells of
    `grid.plain()` that lie in failing cells, merged (`merge_cells`)."""
    counts = [len(s) + 1 for s in grid.splits]
    fail = np.zeros(int(np.prod(counts)), bool)
    fail[failing] = True
    fail = fail.reshape(counts)
    plain, rank = grid.plain(), len(grid.dims)
    edges = [np.array((0,) + s + (d,), dtype=np.int64) for s, d in zip(plain, grid.shape)]
    index = []  # per digit: the digit cell of each plain cell's start, along that cell's dim
    for d, (ds, ss) in enumerate(zip(grid.dims, grid.per_dim())):
        starts = edges[d][:-1]
        along = [1] * rank
        along[d] = len(starts)
        for c, s in zip(np.unravel_index(starts, ds), ss):
            index.append(np.searchsorted(np.asarray(s, dtype=np.int64), c, side="right").reshape(along))
    return merge_cells(np.argwhere(fail[tuple(index)]), edges)
