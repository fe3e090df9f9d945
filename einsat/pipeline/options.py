"""One run's options: `Options`, the one record `einsat.optimize`, the command line and
partitioning build and hand to the pipeline (`einsat.pipeline.run`).

    options = Options.of(cost="cpu", budget=30, verify="prove")   # optimize's keywords, aliases included
    options.budget_s                                             # 30.0: the whole run's seconds

Every field is checked when the record is made: a bad value is an `EinsatError` naming the
keyword (and the command-line option it comes from), never a deep traceback later.

Time, in one place (`einsat.pipeline.plan` gives each phase its seconds):
- `budget`: seconds for the whole run (or a `Budget` the caller shares and may cancel); None:
  no deadline. The command line's `--budget` (and `--time-limit`, its older spelling) is this.
- `extract_seconds`: the most seconds of one ILP solve (default 5). `time_limit=` is its older
  name in `einsat.optimize(...)`, kept as an alias: in the Python API `time_limit` was always
  the ILP's seconds, never the run's.
- `profile_budget`: the most seconds of op profiling for a measured model (default 120).
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
ALIASES = {"time_limit": "extract_seconds"}  # optimize's older keyword -> the field it sets


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
    docstring for each; the module docstring for time). `budget` compares by its seconds
    (`budget_s`), and `progress` (a callback) not at all."""

    cost: Any = DEFAULT_COST               # a cost model or its name (`einsat.cost.models`)
    threads: int | None = None             # intra-op threads cost="cpu" profiles and measures at
    rules: Any = None                      # a rewrite schedule (None: the default schedule)
    limits: Any = None                     # `einsat.egraph.Limits` (None: its defaults)
    extractor: str = "ilp"
    extract_seconds: float | None = None   # one ILP solve's seconds (None: 5); alias `time_limit`
    budget: Any = field(default=None, compare=False)  # the whole run's seconds, or a shared `Budget`
    verify: bool | str = True              # True, False or "prove"
    profile_budget: float | None = None    # seconds of op profiling for a measured model (None: 120)
    check_reps: int | None = None          # rounds of the measured check (None: 15)
    recheck: bool = False
    recipe: bool = False
    partition: Any = None                  # a `Partitioning`, None (the default one) or False (never)
    input_shapes: Any = None               # ONNX import: {name: shape}
    fill_weights: str | None = None        # ONNX import: "random" for stripped/placeholder weights
    seed: int = 0
    precision: str = "fp32"
    half_io: bool = False
    opset: int | None = None               # the ONNX opset cap of the written file (None: the newest onnxruntime opens)
    progress: Any = field(default=None, compare=False)  # a callable taking `ProgressEvent`s
    budget_s: float | None = field(default=None, init=False)  # `budget`'s seconds (None: no deadline)

    @classmethod
    def of(cls, **keywords) -> Options:
        """Options from `einsat.optimize`'s keywords, its older names (`ALIASES`) included."""
        for old, new in ALIASES.items():
            if old in keywords:
                value = keywords.pop(old)
                if keywords.get(new) is not None and value is not None and keywords[new] != value:
                    raise EinsatError(f"{old}= is the older name of {new}=: give one of them, not both")
                if keywords.get(new) is None:
                    keywords[new] = value
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise EinsatError(f"unknown option(s) {unknown}; the options are {sorted(known | set(ALIASES))}")
        return cls(**keywords)

    def keywords(self) -> dict[str, Any]:
        """These options as `einsat.optimize`'s keywords: `optimize(program, **o.keywords())`
        runs with options equal to `o`."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def replace(self, **changes) -> Options:
        """These options with `changes` (checked again)."""
        return replace(self, **changes)

    def __post_init__(self):
        if self.extractor not in EXTRACTORS:
            raise EinsatError(f"unknown extractor {self.extractor!r}; choose 'ilp' or 'greedy'")
        if not (isinstance(self.verify, bool) or self.verify == "prove"):
            raise EinsatError(f"verify= takes True, False or 'prove', not {self.verify!r}")
        _seconds("extract_seconds= (time_limit=)", self.extract_seconds, zero=True)
        _seconds("profile_budget= (--profile-budget)", self.profile_budget, zero=True)
        if isinstance(self.budget, Budget):
            seconds = self.budget.seconds
        else:
            seconds = _seconds("budget= (--budget, --time-limit)", self.budget)
        object.__setattr__(self, "budget_s", None if seconds is None else float(seconds))
        if self.check_reps is not None and (isinstance(self.check_reps, bool) or not isinstance(self.check_reps, int)
                                            or self.check_reps < 1):
            raise EinsatError(f"check_reps= takes a positive number of rounds, not {self.check_reps!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise EinsatError(f"threads= takes a positive number of intra-op threads, not {self.threads!r}")
        if self.opset is not None:
            from einsat.ir.onnx.export import check_opset  # here: `import einsat` does not load onnx
            check_opset(self.opset)
        if not (self.partition is None or self.partition is False or isinstance(self.partition, Partitioning)):
            raise EinsatError(f"partition= takes a Partitioning, None or False, not {type(self.partition).__name__}")
        if self.precision not in PRECISIONS:
            raise EinsatError(f"unknown precision {self.precision!r}; choose one of {list(PRECISIONS)}")
        if self.precision == "tf32":
            tf32_cost(self.cost)  # refused now for a target without TF32
        if self.half_io and half_dtype(self.precision) is None:
            raise EinsatError(f"half_io= (--half-io) needs precision 'bf16' or 'fp16', not {self.precision!r}")
        if self.progress is not None and not callable(self.progress):
            raise EinsatError(f"progress= takes a callable receiving ProgressEvents, "
                              f"not {type(self.progress).__name__}")
        if self.limits is not None:
            from einsat.egraph.session import Limits  # (egglog loads only when a run needs it)
            if not isinstance(self.limits, Limits):
                raise EinsatError(f"limits= takes an einsat.egraph.Limits, not {type(self.limits).__name__}")

    def run_budget(self) -> Budget:
        """The run's `Budget`: the one given, or a new one of `budget` seconds."""
        return self.budget if isinstance(self.budget, Budget) else Budget(self.budget)

    def model(self):
        """The cost model: `cost` by name or as given, at `threads` (see `with_threads`); with
        precision "tf32", the GPU's TF32 model (`tf32_cost`)."""
        from einsat.cost.models import cost_model
        cost = self.target_cost()
        return with_threads(cost_model(cost), self.threads, cost)

    def target_cost(self):
        """`cost`, or with precision "tf32" the GPU's TF32 model it stands for (`tf32_cost`)."""
        return tf32_cost(self.cost) if self.precision == "tf32" else self.cost

    def saturation_limits(self):
        """`limits`, or the defaults (`einsat.egraph.session.Limits`)."""
        from einsat.egraph.session import Limits
        return self.limits or Limits()


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
    """`model` profiling and measuring at `threads` intra-op threads (`optimize(threads=)`):
    for `cost="cpu"` the CPU model of that count (its own profile); None leaves `model` as it is."""
    from einsat.cost.target import TargetCost

    if threads is None:
        return model
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise EinsatError(f"threads= takes a positive number of intra-op threads, not {threads!r}")
    if not (isinstance(model, TargetCost) and model.target == "onnxruntime"):
        raise EinsatError(f"threads= sets the intra-op threads cost=\"cpu\" measures onnxruntime at; the cost "
                          f"model {model.name!r} does not measure onnxruntime")
    if model.threads == threads:
        return model
    if cost != "cpu":
        raise EinsatError(f"the cost model given measures at {model.threads} intra-op thread(s), not threads={threads}:"
                          f" pass cost=\"cpu\" with threads=, or einsat.extract.cpu_model(threads={threads})")
    from einsat.cost.target import cpu_model
    return cpu_model(threads=threads)
