"""One run's options: `Options`, the one record `einsat.optimize`, the command line and
partitioning build and hand to the pipeline (`einsat.pipeline.run`).

    options = Options.of(cost="cpu", budget=30, verify="prove")   # optimize's keywords
    options.budget_s                                             # 30.0: the whole run's seconds

Every field is checked when the record is made: a bad value is an `EinsatError` naming the
keyword (and the command-line option it comes from), never a deep traceback later. A keyword
`optimize` no longer takes (`MOVED`: `time_limit`, `extract_seconds`, `extractor`, `threads`,
`profile_budget`, `check_reps`, `recheck`, `input_shapes`, `fill_weights`, `seed`, `half_io`,
`recipe`) is an `EinsatError` saying what to write instead.

One knob per meaning, what belongs together in one object:
- `budget`: seconds for the whole run (or a `Budget` the caller shares and may cancel); None:
  no deadline. The command line's `--budget` is this. `einsat.pipeline.plan` gives each phase
  its share of it.
- `limits` (`einsat.egraph.Limits`): the search's work: e-nodes, rewrite rounds, the search's
  own seconds (`time_s`), memory, and the extraction (`extractor`, `extract_s`: one ILP solve's
  seconds at most).
- `measure` (`Measure`): how a model that measures its target (cost "cpu") measures: `threads`,
  `profile_s` (seconds of op profiling at most), `check_reps`, `recheck`.
- `load` (`Load`): how an ONNX model is read: `input_shapes`, `fill_weights`, `seed`.
- `precision`: "fp32", "tf32", "bf16", "fp16", or `Precision("bf16", half_io=True)`.
- `recipe` is not one of `optimize`'s keywords: `einsat.optimize.run(program, inputs,
  Options(recipe=True, ...))` returns it (partitioning asks it of its pieces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from einsat.budget import Budget
from einsat.cost.models import DEFAULT_COST
from einsat.errors import EinsatError
from einsat.ir.precision import PRECISIONS, half_dtype

EXECUTORS = ("serial", "process", "ray")   # where a partitioned run's pieces are optimized
EXTRACTORS = ("ilp", "greedy")
# optimize's keywords that are gone -> what to write instead
MOVED = {
    "time_limit": "budget= (the whole run's seconds) or limits=Limits(extract_s=...) (one ILP solve's seconds)",
    "extract_seconds": "limits=Limits(extract_s=...)",
    "extractor": "limits=Limits(extractor=...)",
    "threads": "measure=Measure(threads=...)",
    "profile_budget": "measure=Measure(profile_s=...)",
    "check_reps": "measure=Measure(check_reps=...)",
    "recheck": "measure=Measure(recheck=True)",
    "input_shapes": "load=Load(input_shapes=...)",
    "fill_weights": "load=Load(fill_weights=...)",
    "seed": "load=Load(seed=...)",
    "half_io": "precision=Precision('bf16' or 'fp16', half_io=True)",
    "recipe": "einsat.optimize.run(program, example_inputs, Options(recipe=True, ...)), whose Result has .recipe",
}


def moved(keywords) -> None:
    """A clear error for a keyword `optimize` no longer takes (`MOVED`), or one it never took."""
    for name in keywords:
        if name in MOVED:
            raise EinsatError(f"optimize(): {name}= is gone; use {MOVED[name]}")
    if keywords:
        raise EinsatError(f"optimize(): unknown keyword(s) {sorted(keywords)}; the keywords are {sorted(KEYWORDS)}")


@dataclass(frozen=True)
class Load:
    """How an ONNX model is read (`einsat.load_onnx`), for `einsat.optimize(load=...)`.

    input_shapes: {input name: shape} fixes an input's symbolic dims (`--input-shape`);
    fill_weights: "random" gives stripped or placeholder weights seeded random values
        (`--fill-weights`);
    seed: the seed of those random weights, and of the random inputs a half precision's
        conversion is checked on;
    sizes: {symbol: [sizes]}: a program with symbolic dims (an ONNX model whose `dim_param`s
        `input_shapes` leaves, or a Graph from `load_onnx(..., symbolic=True)`) is optimized once
        for every size and costed and verified at these (`--dim sequence=1,128,512`); a symbol
        not named takes its default sizes (`einsat.pipeline.symbolic.DEFAULT_SIZES`).
    """

    input_shapes: Any = None
    fill_weights: str | None = None
    seed: int = 0
    sizes: Any = None

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise EinsatError(f"Load(seed=) takes an integer, not {self.seed!r}")


KEEP_RULES = ("faster", "not slower")  # `Measure.keep`


@dataclass(frozen=True)
class Measure:
    """How a cost model that measures its target (cost "cpu": onnxruntime on this machine)
    measures, for `einsat.optimize(measure=...)`; other models ignore it.

    threads: the intra-op threads it profiles and measures at, the count the program will be
        deployed with (None: 1; `--threads`);
    profile_s: the most seconds of op profiling in the run (None: 120; `--profile-budget`);
    check_reps: interleaved rounds of the input against the result (None: 15);
    recheck: time the two programs again even when an earlier run kept the verdict (`--recheck`);
    keep: which result the check returns: "faster" (one measured faster beyond noise; the
        default) or "not slower" (one not measured slower beyond noise: what a partitioned run
        gives its pieces, whose stitched whole is then timed and returned only if faster);
    not_slower_at: other intra-op thread counts the file will also run at (`--not-slower-at`):
        a result measured faster at `threads` is returned only if it is not measured slower
        beyond noise at each of these too, timed side by side there by the same check (its
        verdicts kept in that count's own profile folder). Empty by default: the check is then
        at `threads` alone. A partitioned run asks it of each whole it times, not of its pieces.
    """

    threads: int | None = None
    profile_s: float | None = None
    check_reps: int | None = None
    recheck: bool = False
    keep: str = "faster"
    not_slower_at: tuple[int, ...] = ()

    def __post_init__(self):
        _seconds("Measure(profile_s=) (--profile-budget)", self.profile_s, zero=True)
        if self.check_reps is not None and (isinstance(self.check_reps, bool) or not isinstance(self.check_reps, int)
                                            or self.check_reps < 1):
            raise EinsatError(f"Measure(check_reps=) takes a positive number of rounds, not {self.check_reps!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise EinsatError(f"Measure(threads=) (--threads) takes a positive number of intra-op threads, "
                              f"not {self.threads!r}")
        if self.keep not in KEEP_RULES:
            raise EinsatError(f"Measure(keep=) takes one of {', '.join(map(repr, KEEP_RULES))}, not {self.keep!r}")
        counts = (self.not_slower_at,) if isinstance(self.not_slower_at, int) else self.not_slower_at
        if isinstance(counts, (str, bytes)) or not hasattr(counts, "__iter__") \
                or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in counts):
            raise EinsatError(f"Measure(not_slower_at=) (--not-slower-at) takes positive numbers of intra-op threads, "
                              f"not {self.not_slower_at!r}")
        # (the deployment count, where named, is what the check measures at already: `never_slower` skips it)
        object.__setattr__(self, "not_slower_at", tuple(dict.fromkeys(counts)))


@dataclass(frozen=True)
class Precision:
    """A half precision whose program's inputs and outputs are half too, for
    `einsat.optimize(precision=Precision("bf16", half_io=True))` (`--half-io`); a plain name
    ("bf16") keeps the program's inputs and outputs fp32."""

    name: str
    half_io: bool = False


@dataclass(frozen=True)
class Partitioning:
    """How `optimize` splits a large program (see `einsat.partition.driver`).

    above: programs with more nodes than this are partitioned (`optimize(partition=None)`);
    piece_nodes: the most nodes in one piece (a repeated unit included): about 40-60 nodes of a
        transformer layer grow an e-graph within the default `Limits.nodes` in a few rewrite steps;
    max_crossing: the most values a cut may cross;
    min_unit: the fewest nodes of a repeated unit that makes pieces of its own;
    reuse: optimize pieces with one fingerprint once;
    executor: "process" (the default), "serial" or "ray" (`partition.executors`);
    workers: processes (this one included) or Ray CPUs (None: the CPUs this process may use);
    address: a Ray cluster's address (None: Ray's default, a local cluster).
    """

    above: int = 256
    piece_nodes: int = 64
    max_crossing: int = 4
    min_unit: int = 8
    reuse: bool = True
    executor: str = "process"
    workers: int | None = None
    address: str | None = None

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise EinsatError(f"unknown executor {self.executor!r}; choose one of {EXECUTORS}")
        if self.piece_nodes < 1 or self.max_crossing < 0 or self.above < 0:
            raise EinsatError(f"invalid partitioning {self}")


@dataclass(frozen=True)
class Options:
    """How one program is optimized: `einsat.optimize`'s keywords as one record (see its
    docstring for each; the module docstring for time), and two fields that are not keywords:
    `half_io` (a `Precision` keyword sets it) and `recipe` (for `einsat.optimize.run`'s callers
    and partitioning's pieces). `budget` compares by its seconds (`budget_s`), and `progress` (a
    callback) not at all."""

    cost: Any = DEFAULT_COST               # a cost model or its name (`einsat.cost.models`)
    budget: Any = field(default=None, compare=False)  # the whole run's seconds, or a shared `Budget`
    limits: Any = None                     # `einsat.egraph.Limits`: the search's work (None: its defaults)
    rules: Any = None                      # a rewrite schedule (None: the default schedule)
    verify: bool | str = True              # True, False or "prove"
    precision: str = "fp32"                # (the keyword also takes a `Precision`)
    load: Load | None = None               # how an ONNX model is read (None: `Load()`)
    measure: Measure | None = None         # how a measured model measures (None: `Measure()`)
    partition: Any = None                  # a `Partitioning`, None (the default one) or False (never)
    opset: int | None = None               # the ONNX opset cap of the written file (None: the newest onnxruntime opens)
    progress: Any = field(default=None, compare=False)  # a callable taking `ProgressEvent`s
    half_io: bool = False                  # not a keyword: `precision=Precision(..., half_io=True)`
    recipe: bool = False                   # not a keyword: `Result.recipe` (`einsat.optimize.run`)
    budget_s: float | None = field(default=None, init=False)  # `budget`'s seconds (None: no deadline)

    @classmethod
    def of(cls, **keywords) -> Options:
        """Options from `einsat.optimize`'s keywords (`KEYWORDS`); a keyword it no longer takes
        is an error naming what to write instead (`MOVED`)."""
        moved({k: v for k, v in keywords.items() if k not in KEYWORDS})
        precision = keywords.get("precision", "fp32")
        if isinstance(precision, Precision):
            keywords["precision"], keywords["half_io"] = precision.name, precision.half_io
        return cls(**keywords)

    def keywords(self) -> dict[str, Any]:
        """These options as `einsat.optimize`'s keywords: `optimize(program, **o.keywords())`
        runs with options equal to `o` (but for `recipe`, which is not a keyword)."""
        given = {name: getattr(self, name) for name in KEYWORDS}
        if self.half_io:
            given["precision"] = Precision(self.precision, half_io=True)
        return given

    def replace(self, **changes) -> Options:
        """These options with `changes` (checked again)."""
        return replace(self, **changes)

    def __post_init__(self):
        limits = self.saturation_limits()
        if limits.extractor not in EXTRACTORS:
            raise EinsatError(f"unknown extractor {limits.extractor!r} (Limits(extractor=)); choose 'ilp' or 'greedy'")
        _seconds("Limits(extract_s=)", limits.extract_s, zero=True)
        if not (isinstance(self.verify, bool) or self.verify == "prove"):
            raise EinsatError(f"verify= takes True, False or 'prove', not {self.verify!r}")
        if isinstance(self.budget, Budget):
            seconds = self.budget.seconds
        else:
            seconds = _seconds("budget= (--budget)", self.budget)
        object.__setattr__(self, "budget_s", None if seconds is None else float(seconds))
        for name, kind in (("load", Load), ("measure", Measure)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise EinsatError(f"{name}= takes an einsat.{kind.__name__}(...), not {type(value).__name__}")
        if self.opset is not None:
            from einsat.ir.onnx.export import check_opset  # here: `import einsat` does not load onnx
            check_opset(self.opset)
        if not (self.partition is None or self.partition is False or isinstance(self.partition, Partitioning)):
            raise EinsatError(f"partition= takes a Partitioning, None or False, not {type(self.partition).__name__}")
        if not isinstance(self.precision, str) or self.precision not in PRECISIONS:
            raise EinsatError(f"unknown precision {self.precision!r}; choose one of {list(PRECISIONS)} "
                              f"(or Precision('bf16'/'fp16', half_io=True))")
        if self.precision == "tf32":
            tf32_cost(self.cost)  # refused now for a target without TF32
        if self.half_io and half_dtype(self.precision) is None:
            raise EinsatError(f"half_io (--half-io, Precision(half_io=True)) needs precision 'bf16' or 'fp16', "
                              f"not {self.precision!r}")
        if self.progress is not None and not callable(self.progress):
            raise EinsatError(f"progress= takes a callable receiving ProgressEvents, "
                              f"not {type(self.progress).__name__}")

    @property
    def loading(self) -> Load:
        """`load`, or the defaults."""
        return self.load or Load()

    @property
    def measuring(self) -> Measure:
        """`measure`, or the defaults."""
        return self.measure or Measure()

    def run_budget(self) -> Budget:
        """The run's `Budget`: the one given, or a new one of `budget` seconds."""
        return self.budget if isinstance(self.budget, Budget) else Budget(self.budget)

    def model(self):
        """The cost model: `cost` by name or as given, at `threads` (see `with_threads`); with
        precision "tf32", the GPU's TF32 model (`tf32_cost`)."""
        from einsat.cost.models import cost_model
        from einsat.cost.target import TargetCost
        cost = self.target_cost()
        model = with_threads(cost_model(cost), self.measuring.threads, cost)
        if self.measuring.not_slower_at and not (isinstance(model, TargetCost) and model.target == "onnxruntime"):
            raise EinsatError(f"Measure(not_slower_at=) (--not-slower-at) names other intra-op thread counts "
                              f"cost=\"cpu\" checks onnxruntime at; the cost model {model.name!r} does not measure "
                              "onnxruntime")
        return model

    def target_cost(self):
        """`cost`, or with precision "tf32" the GPU's TF32 model it stands for (`tf32_cost`)."""
        return tf32_cost(self.cost) if self.precision == "tf32" else self.cost

    def saturation_limits(self):
        """`limits`, or the defaults (`einsat.egraph.session.Limits`)."""
        from einsat.egraph.session import Limits  # (egglog loads only when a run needs it)
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise EinsatError(f"limits= takes an einsat.egraph.Limits, not {type(self.limits).__name__}")
        return self.limits or Limits()


# `einsat.optimize`'s keywords (besides the program and its example inputs): the fields but the two
# that are not keywords
KEYWORDS = tuple(f.name for f in fields(Options) if f.init and f.name not in ("half_io", "recipe"))


def tf32_cost(cost):
    """The cost model a "tf32" run uses: TF32 is how a GPU may run an fp32 program's matrix products
    (the program and the ONNX written stay fp32), so the choice is the GPU's TF32 model: "h100" and
    "h100-roofline" become "h100-tf32" (a TF32 roofline: no TF32 profile is committed), likewise
    h200; a model given as an object must be one (`tf32` true). A CPU target has no TF32: refused."""
    if not isinstance(cost, str):
        if getattr(cost, "tf32", False):
            return cost
        raise EinsatError(f"precision 'tf32' needs a GPU cost model with TF32 matrix products (tf32=True), "
                          f"not {getattr(cost, 'name', cost)!r}")
    from einsat.cost.models import gpu_kind
    gpu = gpu_kind(cost)
    if gpu is not None:
        return f"{gpu}-tf32"
    raise EinsatError(f"precision 'tf32' (--precision tf32) is a GPU's way of running fp32 matrix products; "
                      f"cost {cost!r} has no TF32: use cost 'h100' or 'h200' (their TF32 models), or precision "
                      f"'fp32'")


def _seconds(what: str, value, zero: bool = False) -> float | None:
    """`value` as seconds (None stays None); a clear error for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or value < 0 or (value == 0 and not zero):
        raise EinsatError(f"{what} takes {'non-negative' if zero else 'positive'} seconds, not {value!r}")
    return float(value)


def with_threads(model, threads: int | None, cost):
    """`model` profiling and measuring at `threads` intra-op threads (`Measure(threads=)`):
    for `cost="cpu"` the CPU model of that count (its own profile); None leaves `model` as it is."""
    from einsat.cost.target import TargetCost

    if threads is None:
        return model
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise EinsatError(f"Measure(threads=) takes a positive number of intra-op threads, not {threads!r}")
    if not (isinstance(model, TargetCost) and model.target == "onnxruntime"):
        raise EinsatError(f"Measure(threads=) sets the intra-op threads cost=\"cpu\" measures onnxruntime at; the cost "
                          f"model {model.name!r} does not measure onnxruntime")
    if model.threads == threads:
        return model
    if cost != "cpu":
        raise EinsatError(f"the cost model given measures at {model.threads} intra-op thread(s), not "
                          f"Measure(threads={threads}): pass cost=\"cpu\" with measure=Measure(threads=...), or "
                          f"einsat.extract.cpu_model(threads={threads})")
    from einsat.cost.target import cpu_model
    return cpu_model(threads=threads)
