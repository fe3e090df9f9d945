"""Saved fingerprints of the programs `einsat.optimize` extracts for ten workloads (#26).

What a user sees of a run is the program it hands back. This script optimizes ten small
workloads that between them take every path of the run (a CNN, TASO's BERT, an LLM decoder
layer, NasRNN, a PET mutant, an EinNet derivation, a partitioned model, the measured CPU model
on a scripted profile, the fusion generator, an imperative function) and reduces each result to
a fingerprint: a structural key (ops, attributes, wiring, types; value names left out:
`structure`), compared exactly; a sketch of each weight in order of first use (norm, largest
magnitude, sums with fixed pseudo-random signs: `sketch`), compared within a tolerance, so that
the last bits a CPU's BLAS kernel rounds differently in folded weights do not count (#38); and
the op counts and modeled cost, compared exactly, as a readable summary. Each run is bounded by
work (e-nodes, iterations, the ILP's nodes), never by the clock: the time limits lie far off,
and a run that stops on one is an error here, not a fingerprint.

    python scripts/fingerprints.py             # recompute, compare with tests/data/fingerprints.json
    python scripts/fingerprints.py --write     # recompute twice (they must agree), save, print changes
    python scripts/fingerprints.py bert_tensat nasrnn    # only these
    python scripts/fingerprints.py --tree /tmp/old nasrnn   # einsat, benchmarks and tests of another checkout

`--write` runs on a committed tree only (einsat, benchmarks, tests and scripts as committed; the
saved file aside): each entry records the commit of the code that made it, and an entry that
still matches is kept as it was. The programs were first saved at commit a187c90 (before #26's
refactor of the orchestration); `git log tests/data/fingerprints.json` says what changed since.
`tests/test_fingerprints.py` recomputes them and fails naming the workload that changed. To find
the commit that changed one: `git clone -q . /tmp/old && git -C /tmp/old checkout -q COMMIT`, then
`--tree /tmp/old NAME` at commits between a187c90 and HEAD (the saved fingerprints stay this
checkout's; an einsat module found outside the tree, as an editable install fills in a package the
tree lacks, is an error). Run from the repository root: the workloads come from `benchmarks/` and
`tests/`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TREE_ENV = "EINSAT_FINGERPRINTS_TREE"  # set by --tree: the checkout whose einsat, benchmarks, tests are run
PATH = ROOT / "tests" / "data" / "fingerprints.json"
ILP_SECONDS = 60.0  # far off: the ILP stops on its branch-and-bound work, not on this


def _limits(**kw):
    from einsat.egraph import Limits
    ilp = {"extract_s": ILP_SECONDS} if "extract_s" in Limits.__dataclass_fields__ else {}  # (--tree: older ones)
    return Limits(**{"nodes": 30_000, "iterations": 10, "time_s": 120.0, **ilp, **kw})


def _ilp_keyword() -> dict:
    """The ILP's seconds as an older checkout's `optimize` took them (`--tree`): `time_limit=`,
    before `Limits.extract_s` (which `_limits` sets)."""
    from einsat.egraph import Limits
    return {} if "extract_s" in Limits.__dataclass_fields__ else {"time_limit": ILP_SECONDS}


def _optimize(program, example_inputs=None, **kw):
    import einsat
    kw.setdefault("limits", _limits())
    kw.setdefault("partition", False)
    return einsat.optimize(program, example_inputs, **_ilp_keyword(), **kw)


# -- the workloads: name -> a function returning `einsat.optimize`'s result ------------------------

def cnn_squeezenet():
    """SqueezeNet 1.1 at 32x32 (convs, concat of fire modules, pooling) under the default model."""
    from benchmarks.workloads.convnets import squeezenet
    return _optimize(squeezenet(image=32, classes=10))


def bert_tensat():
    """TASO's BERT layer (Q/K/V merged by folding their weights), attention rewrites included."""
    from benchmarks.workloads.transformer import bert_tensat
    return _optimize(bert_tensat(seq=16, hidden=64, heads=4, layers=1))


def llama_decode():
    """A Llama decoder layer against a KV cache at the tests' sizes: rmsnorm, rotary, GQA, SwiGLU."""
    from benchmarks.workloads.llm import TEST_SIZES, llama_decode
    return _optimize(llama_decode(**TEST_SIZES["llama_decode"]))


def nasrnn():
    """NasRNN, two steps of hidden 32: TASO's matmul merging."""
    from benchmarks.workloads.rnn import nasrnn
    return _optimize(nasrnn(steps=2, hidden=32))


def pet_mutant():
    """PET's Figure 1: a conv over a batch of images as one conv on images side by side, under a
    stub profile that prices the wide conv cheaper (PET's forms, no EinNet derivations)."""
    from einsat import GraphBuilder
    from einsat.rewrites.schedule import default_schedule
    from tests.rewrites.mutate.costs import paper_cost
    x, f = (4, 3, 5, 6), 2
    n, c, h, w = x
    b = GraphBuilder("fig1")
    g = b.build(b.conv(b.input("x", x), b.weight("w", (f, c, 3, 3)), padding=1))
    cost = paper_cost({(x, (f, c, 3, 3), (1, 1), 1): 40.0, ((n // 2, c, h, 2 * w), (f, c, 3, 3), (1, 1), 1): 12.0})
    return _optimize(g, cost=cost, rules=default_schedule(derivations=False),
                     limits=_limits(nodes=30_000, iterations=10, generator_s=120.0, time_s=300.0))


def einnet_derivation():
    """EinNet's Figure 3: a 3x3 conv derived into a matmul and an eOperator, under a model where
    the derived program pays (`tests.rewrites.derive.cases.DerivedCheaper`)."""
    from tests.rewrites.derive import cases
    g = cases.conv3x3(1, 16, 8, 8, np.float64)
    return _optimize(g, cost=cases.DerivedCheaper(), limits=_limits(nodes=30_000, iterations=6))


def partitioned():
    """Three TASO BERT layers cut into pieces of at most 64 nodes: one optimized, two reused."""
    from benchmarks.workloads.transformer import bert_tensat
    from einsat.partition import Partitioning
    g = bert_tensat(seq=16, hidden=64, heads=4, layers=3, softmax=True)
    return _optimize(g, partition=Partitioning(above=0, piece_nodes=64, executor="serial"))


def fusion_layernorm():
    """One BERT layer under h100 without the attention rewrites: its layernorms, residual adds and
    softmax become eops (the fusion generator)."""
    from benchmarks.workloads.transformer import bert
    from einsat.egraph import Schedule
    from einsat.rewrites.schedule import default_schedule
    rules = Schedule(tuple(p for p in default_schedule().phases if "attention" not in getattr(p, "name", "")))
    return _optimize(bert(seq=16, hidden=64, heads=2, layers=1, ffn=256), cost="h100", rules=rules)


def imperative_attention():
    """An imperative NumPy function (in-place causal mask and softmax), functionalized to TensorSSA."""
    from benchmarks.imperative.attention import attention_inputs, masked_attention
    args = attention_inputs(np.random.default_rng(0))
    return _optimize(masked_attention, args)


# The scripted CPU profile: each signature the run asks to time gets a time from a formula of its
# FLOPs and bytes, never from a clock, and the side-by-side check finds the candidate at half the
# input's time. The two functions that time (`runtime.profiler.profile_signatures` and
# `check_measured`) are replaced wherever an einsat module holds them, so a move of either does
# not lose the patch; a run that finds neither is an error, not a fingerprint.
def cpu_scripted():
    """cost="cpu"'s path (the input's profile, the candidates', the measured choice, the
    side-by-side verdict) on a scripted profile: an MLP whose two branches share an input."""
    import einsat
    from einsat import GraphBuilder

    b = GraphBuilder("mlp", seed=5)
    x = b.input("x", (16, 32))
    h = b.relu(b.add(b.matmul(x, b.weight("w1", (32, 64))), b.weight("b1", (64,))))
    k = b.relu(b.add(b.matmul(x, b.weight("w2", (32, 64))), b.weight("b2", (64,))))
    g = b.build(b.matmul(b.mul(h, k), b.weight("w3", (64, 16))))
    SCRIPTED.update(profiled=0, checked=0)
    with scripted_timing(), tempfile.TemporaryDirectory() as tmp:
        model = _cpu_model(os.path.join(tmp, "profile.json"))
        result = einsat.optimize(g, cost=model, limits=_limits(), partition=False, **_ilp_keyword())
    if not result.report.profile or not result.report.profile.get("measured"):
        raise RuntimeError(f"cpu_scripted: the scripted profile timed nothing ({result.report.profile})")
    if not (SCRIPTED["profiled"] and SCRIPTED["checked"]):  # else a clock timed what this run measured
        raise RuntimeError(f"cpu_scripted: the run did not time through the scripted functions ({SCRIPTED}): "
                           "where does it time now?")
    return result


def _cpu_model(path):
    for name in ("einsat.cost.target", "einsat.extract.target"):  # extract/ before #26 item 2
        module = _own_module(name)
        if module is not None:
            return module.cpu_model(path=path)
    raise RuntimeError("cpu_scripted: no cpu_model in einsat.cost.target or einsat.extract.target")


def _inside_einsat(module) -> bool:
    return _inside_einsat_path(module.__file__)


def _inside_einsat_path(path: str) -> bool:
    import einsat
    return os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(einsat.__file__)) + os.sep)


def _own_module(name: str):
    """The module `name` of the imported einsat's tree, or None where that tree has none (an
    editable install of another checkout would otherwise fill it in: find_spec says where from
    before anything is run)."""
    import importlib
    import importlib.util
    parts = name.split(".")
    for k in range(2, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:k]))
        except ImportError:
            return None
        if spec is None or not spec.origin or not _inside_einsat_path(spec.origin):
            return None
    return importlib.import_module(name)


def foreign_modules() -> list[str]:
    """Loaded einsat modules that come from outside the imported einsat's tree (an editable install
    of another checkout filling in a package this one lacks): a fingerprint made so is not this
    tree's."""
    return sorted(n for n, m in sys.modules.items() if n.startswith("einsat.") and getattr(m, "__file__", None)
                  and not _inside_einsat(m))


SCRIPTED = {"profiled": 0, "checked": 0}  # calls of the scripted timing functions, by the last cpu_scripted run


def _scripted_profile(sigs, *args, **kw):
    from einsat.runtime.profiler import ProfileRun
    SCRIPTED["profiled"] += 1
    out = ProfileRun(method={"reps": 15, "statistic": "median", "order": "scripted", "call_overhead_us": 3.0,
                             "node_overhead_us": 0.5, "stream_bytes_per_us": 8000.0, "cache_bytes": 32 << 20,
                             "nchwc_block": 8})
    out.call_overhead_us = 3.0
    for sig in sigs:
        flops, size = sig.flops(), sig.bytes()
        us = round(1.0 + flops / 4000.0 + size / 8000.0, 3)
        out.entries[sig.key] = {"us": us, "raw_us": us + 3.0, "p10_us": us + 2.9, "p90_us": us + 3.1, "reps": 15,
                                "outliers": 0, "flops": flops, "bytes": size, "kernels": 1}
    return out


def _scripted_check(model, baseline, candidate, reps=15):
    from einsat.runtime.profiler import judge
    SCRIPTED["checked"] += 1
    base = [1000.0 + k for k in range(15)]
    return judge(base, [v / 2 for v in base])


class scripted_timing:
    """Within the block, `profile_signatures` and `check_measured` are the scripted ones in every
    loaded einsat module that holds them."""

    def __enter__(self):
        import pkgutil

        import einsat.runtime.profiler as profiler
        # einsat.measure: an older checkout's (before einsat.pipeline), for --tree
        for mod in ("einsat.measure", "einsat.optimize", "einsat.pipeline", "einsat.cost"):
            package = _own_module(mod)
            for sub in pkgutil.iter_modules(getattr(package, "__path__", None) or []):
                _own_module(f"{mod}.{sub.name}")  # every module that may hold them, loaded before patching
        self.saved = []
        real = {"profile_signatures": profiler.profile_signatures}
        for m in [m for n, m in sorted(sys.modules.items()) if n.startswith("einsat") and m is not None]:
            for name, fn in (("profile_signatures", _scripted_profile), ("check_measured", _scripted_check)):
                held = getattr(m, name, None)
                if held is not None and (name == "check_measured" or held is real[name]):
                    self.saved.append((m, name, held))
                    setattr(m, name, fn)
        names = {name for _, name, _ in self.saved}
        if names != {"profile_signatures", "check_measured"}:
            self.__exit__()
            raise RuntimeError(f"scripted_timing: found only {sorted(names)} to replace; where do they live now?")
        return self

    def __exit__(self, *exc):
        for m, name, fn in reversed(self.saved):
            setattr(m, name, fn)


WORKLOADS = {
    "cnn_squeezenet": cnn_squeezenet,
    "bert_tensat": bert_tensat,
    "llama_decode": llama_decode,
    "nasrnn": nasrnn,
    "pet_mutant": pet_mutant,
    "einnet_derivation": einnet_derivation,
    "partitioned": partitioned,
    "cpu_scripted": cpu_scripted,
    "fusion_layernorm": fusion_layernorm,
    "imperative_attention": imperative_attention,
}


# -- fingerprints ------------------------------------------------------------------------------------

def fingerprint(result) -> dict:
    """The result's structure key, a sketch of each weight (`sketch`), and a readable summary
    (see `structure`)."""
    g = result.graph
    inner: list = []  # the weights of subgraphs (loop and if bodies), in the order they were met
    key, order = structure(g, inner)
    return {"structure": key, "weights": [sketch(v) for v in [*(g.weights[name] for name in order), *inner]],
            "ops": dict(sorted(g.op_counts().items())), "cost_after": round(float(result.report.cost_after), 6)}


# -- weights: compared within a tolerance, never by their bytes (#38) ------------------------------
#
# A folded weight (a product of weights, evaluated once in NumPy) differs in its last bits from one
# BLAS kernel to another: OpenBLAS picks its kernel by CPU (Haswell, SkylakeX, Prescott, ARM's...),
# and each sums in its own order. Those bits say nothing about the program, so a fingerprint keeps
# a sketch of each floating weight instead of its bytes: its dtype and shape, its L2 norm, its
# largest magnitude, and SIGNS sums of its values with fixed pseudo-random signs (s_j . a, the
# signs drawn from SHAKE-256, the same on every machine), all summed exactly (math.fsum) in
# float64, so a sketch is a function of the weight's values alone. Two sketches agree when every
# figure is within `rtol(dtype) * L2` of the other's. Why this and not a digest of rounded values:
# a value that sits on a rounding boundary rounds both ways under last-bit noise, whatever the
# number of digits kept, so such a digest fails on some machine sooner or later; a tolerance does
# not. What it lets through and what it catches:
# - noise e (every element a few ulps off): |s_j . e| exceeds t only with probability at most
#   2 exp(-t^2 / (2 |e|^2)) (Hoeffding; the signs know nothing of the kernel's rounding), and
#   |e| is some ulps of |a|, so at t = 128 eps |a| that is nil (float32 folds here differ by at
#   most 2 ulps, |e|/|a| < 2e-7 against the tolerance's 1.5e-5);
# - a change d of one element beyond t moves every signed sum by |d|; a scale by 1 + r moves the
#   norm by r |a|; a permutation, a transpose or a sign flip moves the signed sums by about
#   |a| sqrt(2 k / n) for k of n elements moved: all caught (tests/test_fingerprints.py).
# Integer and boolean weights, and weights with a non-finite value, are kept by a digest of their
# bytes and compared exactly: no kernel rounds them.
SIGNS = 8
_SIGN_SEED = b"einsat fingerprints: weight sketch signs"


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name in {"bfloat16", "float8_e4m3fn", "float8_e5m2"}


def rtol(dtype) -> float:
    """The tolerance of a weight's sketch figures, relative to its L2 norm: 128 ulps of 1 for
    float32 and float64 (1.5e-5 and 2.8e-14); 16 for the half types (1.6e-2 for float16), whose
    folded values are rounded once from float32."""
    dtype = np.dtype(dtype)
    try:
        eps = float(np.finfo(dtype).eps)
    except ValueError:  # ml_dtypes' types have their own finfo
        import ml_dtypes
        eps = float(ml_dtypes.finfo(dtype).eps)
    return (128 if dtype.itemsize >= 4 else 16) * eps


def _signs(n: int) -> np.ndarray:
    """(n, SIGNS) booleans: element i takes sign + in sum j where bit j of byte i is set."""
    stream = np.frombuffer(hashlib.shake_256(_SIGN_SEED).digest(max(n, 1)), np.uint8)[:n]
    return np.unpackbits(stream[:, None], axis=1, bitorder="little").astype(bool)


def sketch(value) -> dict:
    """What a fingerprint keeps of one weight (see above)."""
    import math
    a = np.ascontiguousarray(np.asarray(value))
    out = {"dtype": str(a.dtype), "shape": [int(d) for d in a.shape]}
    if _is_float(a.dtype):
        x = a.astype(np.float64).ravel()
        if np.all(np.isfinite(x)):
            signs = _signs(x.size)
            out["l2"] = math.sqrt(math.fsum(x * x))
            out["max"] = float(np.max(np.abs(x))) if x.size else 0.0
            out["signed"] = [math.fsum(np.where(signs[:, j], x, -x)) for j in range(SIGNS)]
            return out
    out["sha256"] = hashlib.sha256(a.tobytes()).hexdigest()
    return out


def sketch_differences(saved: dict, now: dict) -> list[str]:
    """How two sketches of one weight differ beyond the tolerance, in words (empty: they agree)."""
    if (saved.get("dtype"), saved.get("shape")) != (now.get("dtype"), now.get("shape")):
        return [f"type {saved.get('dtype')}{saved.get('shape')} -> {now.get('dtype')}{now.get('shape')}"]
    if "sha256" in saved or "sha256" in now:
        return [] if saved.get("sha256") == now.get("sha256") else ["values (compared exactly) differ"]
    tol = rtol(saved["dtype"]) * max(saved["l2"], now["l2"])
    pairs = [("L2 norm", saved["l2"], now["l2"]), ("largest magnitude", saved["max"], now["max"])]
    pairs += [(f"signed sum {j}", a, b) for j, (a, b) in enumerate(zip(saved["signed"], now["signed"], strict=True))]
    off = [(what, a, b) for what, a, b in pairs if abs(a - b) > tol]
    if not off:
        return []
    worst = max(off, key=lambda f: abs(f[1] - f[2]))
    return [f"{len(off)} of its {len(pairs)} figures moved beyond the tolerance {tol:.3g} "
            f"(the most: {worst[0]}, {worst[1]:.9g} -> {worst[2]:.9g})"]


def structure(g, inner: list | None = None) -> tuple[str, list[str]]:
    """A SHA-256 of `g`'s program up to value names, and its weights in the order it hashed them.

    The inputs by position with their types; each node's op, attributes (not provenance ones), inputs (an input's
    position, a weight's rank in order of first use, or another node's output by position) and
    output types; the outputs. Weights count by type here (their values go in the weights'
    sketches; a subgraph's, in a loop or if body, are appended to `inner`). Written out here
    rather than taken from `einsat.partition.fingerprint`, so that a change of that module's
    encoding does not change a saved fingerprint."""
    inner = [] if inner is None else inner
    ref: dict[str, tuple] = {name: ("in", k) for k, name in enumerate(g.inputs)}
    weights: list[str] = []
    parts: list = [("inputs", tuple(_type_key(g.types[i]) for i in g.inputs))]
    for k, node in enumerate(g.nodes):
        for i in node.inputs:
            if i and i not in ref and i in g.weights:
                ref[i] = ("weight", len(weights), _type_key(g.types[i]))
                weights.append(i)
        parts.append((node.op.value, tuple(ref[i] if i else ("absent",) for i in node.inputs),
                      tuple(sorted((str(a), _attr_key(v, inner)) for a, v in node.attrs.items()
                                   if not _provenance(node, a))),
                      tuple(_type_key(g.types[o]) for o in node.outputs)))
        for j, o in enumerate(node.outputs):
            ref[o] = ("node", k, j)
    unused = sorted(set(g.weights) - set(weights))
    parts.append(("outputs", tuple(ref[o] for o in g.outputs), ("unused weights", tuple(unused))))
    return hashlib.sha256(repr(parts).encode()).hexdigest(), [*weights, *unused]


def _provenance(node, name: str) -> bool:
    """Whether `name` is a provenance attribute of the node's op (an eop's `chain`: how its ONNX
    export spells it, not what it computes), left out as the profile signatures leave it out."""
    spec = getattr(node.definition, "attrs", {}).get(name)
    return bool(getattr(spec, "provenance", False))


def _type_key(t) -> tuple:
    return (tuple(int(d) for d in t.shape), str(np.dtype(t.dtype)))


def _attr_key(v, inner: list):
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        return ("array", str(a.dtype), a.shape, hashlib.sha256(a.tobytes()).hexdigest())
    if hasattr(v, "nodes") and hasattr(v, "inputs") and hasattr(v, "weights"):  # a subgraph (loop, if_)
        key, order = structure(v, inner)
        weights = [np.asarray(v.weights[w]) for w in order]
        inner.extend(weights)  # their values go in the weights' sketches, after the graph's own
        return ("graph", key, tuple((str(w.dtype), w.shape) for w in weights))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_attr_key(x, inner) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _attr_key(x, inner)) for k, x in v.items())))
    if isinstance(v, np.generic):
        return ("scalar", str(v.dtype), v.item())
    if hasattr(v, "value") and hasattr(type(v), "__members__"):  # an enum
        return ("enum", type(v).__name__, repr(v.value))
    return (type(v).__name__, repr(v))


def stopped_by_time(result) -> str | None:
    """Why `result` is not comparable (a phase stopped by the clock), or None."""
    r = result.report
    if r.saturation is not None and "time" in (r.saturation.stop_reason or ""):
        return f"saturation stopped on time ({r.saturation.stop_reason})"
    if r.extraction is not None and "time limit" in (r.extraction.status or ""):
        return f"the ILP stopped on time ({r.extraction.status})"
    for piece in getattr(r.partition, "pieces", None) or ():
        if "time" in (getattr(piece, "stop_reason", None) or ""):
            return f"a piece's saturation stopped on time ({piece.stop_reason})"
    return None


def compute(name: str) -> dict:
    result = WORKLOADS[name]()
    why = stopped_by_time(result)
    if why:
        raise RuntimeError(f"{name}: {why}; its program is not a work-bounded fingerprint")
    return fingerprint(result)


def tree_commit() -> str:
    """The commit of the checkout whose einsat is imported, "+changes" when its tracked files
    (einsat, benchmarks, tests, scripts; the saved fingerprints aside) differ from it."""
    import einsat
    tree = os.path.dirname(os.path.dirname(os.path.abspath(einsat.__file__)))
    try:
        head = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", tree, "diff", "--quiet", "HEAD", "--", "einsat", "benchmarks", "tests",
                                "scripts", f":(exclude){PATH.relative_to(ROOT)}"],
                               capture_output=True).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def real_commit(commit) -> bool:
    """Whether `commit` names a commit (not "+changes", made from an uncommitted tree)."""
    return isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,40}", commit) is not None


def missing_commit(commit: str) -> bool:
    """Whether this checkout's history lacks `commit` (a rebase rewrote it, say). False where
    that cannot be told: no git, or a shallow clone."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    try:
        shallow = git("rev-parse", "--is-shallow-repository")
        if shallow.returncode != 0 or shallow.stdout.strip() != "false":
            return False
        return git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0
    except OSError:
        return False


def load() -> dict:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


def dumps(saved: dict) -> str:
    """The saved fingerprints as JSON, one line per weight's sketch."""
    lines: dict[str, str] = {}

    def mark(entry: dict) -> dict:
        out = dict(entry)
        if isinstance(out.get("weights"), list):
            out["weights"] = []
            for w in entry["weights"]:
                token = f"@sketch{len(lines)}@"
                lines[token] = json.dumps(w)
                out["weights"].append(token)
        return out

    text = json.dumps({k: mark(v) for k, v in saved.items()}, indent=1)
    for token, line in lines.items():
        text = text.replace(json.dumps(token), line, 1)
    return text + "\n"


def differences(name: str, saved: dict | None, now: dict) -> list[str]:
    """What changed between two fingerprints of `name`, in words: the structure, op counts and
    modeled cost exactly, the weights within the tolerance of `sketch_differences`."""
    if saved is None:
        return [f"{name}: new (no saved fingerprint)"]
    out = []
    for k in ("structure", "cost_after"):
        if saved.get(k) != now.get(k):
            out.append(f"{name}: {k} {saved.get(k)} -> {now.get(k)}")
    out += [f"{name}: {line}" for line in weight_differences(saved.get("weights"), now.get("weights"))]
    ops = sorted(set(saved.get("ops", {})) | set(now.get("ops", {})))
    delta = [f"{op} {saved.get('ops', {}).get(op, 0)}->{now['ops'].get(op, 0)}" for op in ops
             if saved.get("ops", {}).get(op, 0) != now["ops"].get(op, 0)]
    if delta:
        out.append(f"{name}: op counts " + ", ".join(delta))
    return out


def weight_differences(saved, now) -> list[str]:
    """The weights (in order of first use) whose sketches differ, in words."""
    if not isinstance(saved, list):
        return [f"weights saved as {type(saved).__name__}, not a list of sketches (made before #38): regenerate"]
    if len(saved) != len(now):
        return [f"weights: {len(saved)} -> {len(now)}"]
    return [f"weight {k} ({b['dtype']}{tuple(b['shape'])}): {line}"
            for k, (a, b) in enumerate(zip(saved, now)) for line in sketch_differences(a, b)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="workloads (default: all): " + ", ".join(WORKLOADS))
    p.add_argument("--write", action="store_true", help="compute twice, check they agree, save")
    p.add_argument("--tree", help="compute with the einsat, benchmarks and tests of this checkout")
    args = p.parse_args(argv)
    if args.tree:
        if args.write:
            p.error("--write saves this checkout's fingerprints: run it without --tree")
        tree = os.path.abspath(args.tree)
        env = {**os.environ, "PYTHONPATH": tree, TREE_ENV: tree}
        return subprocess.call([sys.executable, os.path.abspath(__file__), *args.names], env=env, cwd=tree)
    import einsat
    print(f"einsat from {os.path.dirname(einsat.__file__)}", file=sys.stderr)
    names = args.names or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    saved = load()
    if args.write:
        made = tree_commit()
        if not real_commit(made):
            raise SystemExit(f"the tree is at {made}: fingerprints are saved from a committed tree, so that each "
                             "records the commit of the code that made it; commit, then run --write again")
    changed = []
    fresh = {}
    for name in names:
        now = compute(name)
        if args.write:
            again = compute(name)
            if again != now:
                raise SystemExit(f"{name}: two runs disagree ({differences(name, now, again)}): not deterministic")
        fresh[name] = now
        diff = differences(name, saved.get(name), now)
        changed += diff
        state = ("new" if name not in saved else "changed") if diff else "same"
        print(f"{name}: {state}  {now['structure'][:16]}  {now['ops']}")
    for line in changed:
        print("  " + line)
    foreign = foreign_modules()
    if foreign:
        raise SystemExit(f"modules from outside {os.path.dirname(einsat.__file__)}: {foreign}")
    if args.write:
        for name, now in fresh.items():  # an unchanged one (within the tolerance) is kept as it was saved
            commit = saved[name].get("commit")
            if differences(name, saved.get(name), now) or not real_commit(commit) or missing_commit(commit):
                saved[name] = {**now, "commit": made}
        PATH.parent.mkdir(parents=True, exist_ok=True)
        PATH.write_text(dumps({k: saved[k] for k in WORKLOADS if k in saved}))
        print(f"wrote {PATH}")
        return 0
    return 1 if changed else 0


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get(TREE_ENV) or str(ROOT))
    sys.exit(main())
