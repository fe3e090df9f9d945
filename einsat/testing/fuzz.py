"""`einsat fuzz`: random programs through transformations, checked for equivalence.

Each target is a strategy of cases and a check that returns None when the case passes or a
message saying what went wrong. Hypothesis draws up to the budget, and on the first failure
shrinks it to a minimal case, printed as builder code that reproduces it.

Targets:
  optimize   random programs -> `einsat.optimize` -> numeric equivalence (and over the field
             when both programs are multi-linear); when the caller passes `optimize` (this package
             sits below the top level, which passes `einsat.optimize`: `einsat fuzz` does)
  fusion     element-wise / broadcast / reduction chains (`programs.chains`, half of them with an
             interior value also an output: a norm's eop_multi writes it) -> `einsat.optimize`
             under the H100 model (chains become fused eOperators) -> `to_onnx` -> `load_onnx`
             -> numeric equivalence; with `optimize`, like the optimize target
  onnx       random programs -> `to_onnx` -> `load_onnx` -> numeric equivalence
  verify     the verifier itself: mutant pairs with known regions -> `find_differences` must
             report exactly those regions, and the corrected mutant must be equivalent
Register more with `register_transform(name, fn)`: `fn(graph) -> graph` must keep outputs.

Every case of a transformation target (optimize, fusion, onnx, and those registered) is also a
differential test of the written file (`check_written_onnx`): the transformation's result,
written as ONNX (`to_onnx`, fused operators included), runs in an onnxruntime CPU session and
must give what einsat's NumPy run of the input gives. A difference, or a file onnxruntime
refuses, fails the case like any other, shrunk and printed as builder code to replay.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample, Unsatisfiable

from einsat.ir.graph import Graph
from einsat.ir.onnx.io import load_onnx, to_onnx
from einsat.runtime import random_inputs, run
from einsat.runtime.backend_onnxruntime import new_session, unsafe_optimizers
from einsat.testing.codegen import builder_code
from einsat.testing.mutants import mutant_pairs
from einsat.testing.programs import chains, programs
from einsat.verify.correction import correct
from einsat.verify.corrector import content_key, find_differences
from einsat.verify.field import NotMultilinearError
from einsat.verify.field.table import exact_over_field
from einsat.verify.numeric import equivalent, tolerance


@dataclass
class Target:
    strategy: Callable[[], object]
    check: Callable[[object], str | None]
    graph_of: Callable[[object], Graph] = lambda case: case


@dataclass
class Failure:
    target: str
    case: object
    message: str
    code: str

    def __str__(self) -> str:
        return (f"FAILED {self.target}: {self.message}\n\n# minimal reproduction (builder code):\n{self.code}")


@dataclass
class FuzzReport:
    budget: int
    seed: int
    examples: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        head = ", ".join(f"{name}: {n} cases" for name, n in self.examples.items())
        lines = [f"einsat fuzz (budget {self.budget}, seed {self.seed}): {head}"]
        lines += [str(f) for f in self.failures]
        lines.append("all passed" if self.ok else f"{len(self.failures)} target(s) failed")
        return "\n".join(lines)


def _programs():
    return programs(max_nodes=5, max_side=4, max_size=512, constant_tails=True)


def _chains():
    return _shared_chains(chains(max_nodes=6, max_side=5))


@st.composite
def _shared_chains(draw, strategy):
    """A chain (`programs.chains`), half the time with one of its interior values an output too:
    a value read outside the chain, which a fused norm or softmax then also writes (`eop_multi`)."""
    g = draw(strategy)
    interior = [o for n in g.nodes for o in n.outputs if o not in g.outputs]
    if interior and draw(st.booleans()):
        g = Graph(g.nodes, g.input_types(), [draw(st.sampled_from(interior))] + list(g.outputs), g.weights, g.name)
    return g


def _is_multilinear(g: Graph) -> bool:
    return all(exact_over_field(node) for node in g.nodes)


def _new_weights(graph: Graph, out: Graph) -> list[str]:
    """Weights of `out` whose values are not those of any weight of `graph`."""
    have = {content_key(np.asarray(a)) for a in graph.weights.values()}
    return [n for n, a in out.weights.items() if content_key(np.asarray(a)) not in have]


def _inlined_weights(graph: Graph, out: Graph) -> list[str]:
    """Weights of `graph` whose values `out` holds in no weight while it has eOperators: a fused
    eop reads a scalar weight as a constant of its expression (over the field a weight is a
    variable, a constant is not, so the two programs differ there by construction)."""
    from einsat.ir.registry import Op
    exprs = [str(n.attrs.get("expr") or n.attrs.get("exprs", "")) for n in out.nodes
             if n.op in (Op.EOP, Op.EOP_MULTI)]
    if not exprs:
        return []
    have = {content_key(np.asarray(a)) for a in out.weights.values()}

    def inlined(a: np.ndarray) -> bool:
        # a one-element weight may also stay a weight elsewhere in `out` (one reader fused, another
        # not: seed 9's (x + w) * (x + w)); its value then stands in an expression as a literal
        return a.size == 1 and any(repr(float(a.reshape(-1)[0])) in e for e in exprs)

    return [n for n, a in graph.weights.items()
            if content_key(np.asarray(a)) not in have or inlined(np.asarray(a))]


def _differs(want: np.ndarray, got: np.ndarray, tol: float) -> str | None:
    """What differs between NumPy's `want` and onnxruntime's `got` (None: within `tol`, relative to
    each value and the output's scale, as the numeric verification compares; NaN and inf where
    NumPy has them)."""
    if want.shape != got.shape:
        return f"shape {got.shape}, NumPy's {want.shape}"
    if want.dtype != got.dtype:
        return f"dtype {got.dtype}, NumPy's {want.dtype}"
    if want.size == 0:
        return None
    if tol == 0.0:
        bad = want != got
        if not bad.any():
            return None
        k = np.unravel_index(int(np.argmax(bad)), want.shape)
        return f"at {tuple(map(int, k))}: {got[k]!r}, NumPy's {want[k]!r}"
    w, g = want.astype(np.float64), got.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same_special = (np.isnan(w) & np.isnan(g)) | (np.isinf(w) & (w == g))
        special = np.isnan(w) | np.isnan(g) | np.isinf(w) | np.isinf(g)
        scale = float(np.max(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 0.0
        ratio = np.abs(w - g) / (tol * (np.abs(w) + scale) + np.finfo(np.float64).tiny)
        ratio = np.where(same_special, 0.0, np.where(special, np.inf, ratio))
    k = np.unravel_index(int(np.argmax(ratio)), want.shape)
    if ratio[k] <= 1.0:
        return None
    return (f"at {tuple(map(int, k))}: {got[k]!r}, NumPy's {want[k]!r} (|diff| {abs(w[k] - g[k]):.3g}, "
            f"tolerance {tol:.3g} relative)")


def check_written_onnx(graph: Graph, out: Graph, seed: int = 0) -> str | None:
    """None when `out` written as ONNX runs on onnxruntime (CPU, its graph optimizations on
    but the ones `unsafe_optimizers` names) and gives what einsat's NumPy run of `graph` gives
    on random inputs; else what differs, or what onnxruntime said."""
    inputs = random_inputs(graph, seed)
    want = run(graph, inputs)
    try:
        model = to_onnx(out)
        session = new_session(model.SerializeToString(), threads=1, disabled_optimizers=unsafe_optimizers(out))
        names = [o.name for o in session.get_outputs()]
        feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
        got = dict(zip(names, session.run(None, feeds)))
    except Exception as e:  # noqa: BLE001 - a written file onnxruntime cannot load or run fails the case
        return f"the written ONNX does not run on onnxruntime: {type(e).__name__}: {str(e).strip()[:500]}"
    for name in graph.outputs:
        if name not in got:
            return f"the written ONNX has no output {name!r} (it has {sorted(got)})"
        tol = tolerance(graph, out, want[name].dtype)
        diff = _differs(np.asarray(want[name]), np.asarray(got[name]), tol)
        if diff is not None:
            return f"the written ONNX on onnxruntime differs from NumPy's run of the input: output {name!r} {diff}"
    return None


def check_transform(fn: Callable[[Graph], Graph], graph: Graph) -> str | None:
    """None when `fn(graph)` computes what `graph` does, on NumPy and as its written ONNX on
    onnxruntime (`check_written_onnx`); else what differs (or what was raised)."""
    try:
        out = fn(graph)
        report = equivalent(graph, out)
        if not report:
            return str(report)
        # over the field, weights are exact: a weight the transformation computed (folded in
        # floating point) or inlined into an eop's expression as a constant makes the programs
        # differ exactly, so only the numeric verdict counts then
        if _is_multilinear(graph) and _is_multilinear(out) and not _new_weights(graph, out) \
                and not _inlined_weights(graph, out):
            try:
                diffs = find_differences(graph, out)
            except NotMultilinearError:  # e.g. a division by a computed value: numeric only
                diffs = None
            if diffs is not None and not diffs.equivalent:
                return "differs over the field:\n" + str(diffs)
        return check_written_onnx(graph, out)
    except Exception as e:  # noqa: BLE001  (a transformation that crashes on a valid program fails)
        return f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:])


def check_verifier(pair) -> str | None:
    """None when the corrector finds exactly `pair`'s regions and its correction is equivalent."""
    try:
        diffs = find_differences(pair.original, pair.mutant)
        for o in pair.original.outputs:
            if not np.array_equal(diffs.mask(o), pair.mask(o)):
                return (f"{pair.family}: output {o}: expected regions {[str(r) for r in pair.regions[o]]}, "
                        f"found:\n{diffs}")
        fixed = correct(pair.original, pair.mutant, diffs)
        report = equivalent(pair.original, fixed)
        if not report:
            return f"{pair.family}: the corrected mutant differs numerically:\n{report}"
        again = find_differences(pair.original, fixed)
        if not again.equivalent:
            return f"{pair.family}: the corrected mutant differs over the field:\n{again}"
    except Exception as e:  # noqa: BLE001  (a verifier that crashes on a valid pair fails)
        return f"{pair.family}: {type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:])
    return None


def onnx_round_trip(graph: Graph) -> Graph:
    return load_onnx(to_onnx(graph))


def _greedy():
    from einsat.egraph.session import Limits
    return Limits(extractor="greedy")


def optimize_transform(optimize: Callable) -> Callable[[Graph], Graph]:
    """The transformation `einsat.optimize` (passed in) makes, unverified and greedy."""
    return lambda graph: optimize(graph, verify=False, limits=_greedy()).graph


def fusion_transform(optimize: Callable) -> Callable[[Graph], Graph]:
    """`einsat.optimize` under the H100 model (where chains fuse into eOperators), then the ONNX
    round trip of its result (a fused eop exports as its expression)."""
    return lambda graph: onnx_round_trip(optimize(graph, verify=False, limits=_greedy(), cost="h100").graph)


TARGETS: dict[str, Target] = {}


def register_transform(name: str, fn: Callable[[Graph], Graph], strategy=None) -> None:
    """Fuzz `fn` as target `name` (on `strategy`, default: random programs)."""
    TARGETS[name] = Target(strategy or _programs, lambda g: check_transform(fn, g))


register_transform("onnx", onnx_round_trip)
TARGETS["verify"] = Target(mutant_pairs, check_verifier, graph_of=lambda pair: pair.mutant)


def available_targets(optimize: Callable | None = None) -> list[str]:
    """The default targets: `optimize` first when `optimize` is given (and registers it), then the rest."""
    if optimize is not None:
        register_transform("optimize", optimize_transform(optimize))
        register_transform("fusion", fusion_transform(optimize), strategy=_chains)
    first = [n for n in ("optimize", "fusion") if n in TARGETS]
    return first + [n for n in TARGETS if n not in first]


def _code(target: str, case, graph: Graph) -> str:
    code = builder_code(graph)
    if target == "verify":
        return ("# original:\n" + builder_code(case.original).replace("graph = b.build", "original = b.build")
                + "\n# mutant:\n" + code)
    return code + f"\n# check: einsat.testing.fuzz.TARGETS[{target!r}].check(graph)\n"


def fuzz(budget: int = 200, seed: int = 0, targets: list[str] | None = None,
         optimize: Callable | None = None, progress=None) -> FuzzReport:
    """Spend `budget` cases over `targets` (default `available_targets(optimize)`); shrink any
    failure. `optimize` is `einsat.optimize`, for the `optimize` target; `progress(target, cases
    run, cases allotted)` hears of each case (the CLI shows it)."""
    default = available_targets(optimize)
    names = targets or default
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise ValueError(f"unknown fuzz target(s) {unknown}; choose from {sorted(TARGETS)}")
    report = FuzzReport(budget, seed)
    share = [budget // len(names) + (1 if k < budget % len(names) else 0) for k in range(len(names))]
    for k, (name, n) in enumerate(zip(names, share)):
        if n <= 0:
            continue
        target = TARGETS[name]
        calls = [0]

        def failing(case, target=target, calls=calls, name=name, n=n):
            calls[0] += 1
            if progress is not None:
                progress(name, calls[0], n)
            return target.check(case) is not None

        conf = settings(max_examples=n, database=None, deadline=None, derandomize=False,
                        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
        try:
            case = find(target.strategy(), failing, settings=conf, random=random.Random(seed * 7919 + k))
        except (NoSuchExample, Unsatisfiable):
            report.examples[name] = n
            continue
        report.examples[name] = calls[0]
        graph = target.graph_of(case)
        report.failures.append(Failure(name, case, target.check(case), _code(name, case, graph)))
    return report
