"""`einsat optimize in.onnx -o out.onnx`: the optimizer from the command line.

`--cost` names the cost model as `einsat.optimize(cost=...)` does (`einsat.cost.models`;
`--device` is its deprecated old name). Progress goes to stderr (one redrawn line on a terminal,
plain lines otherwise; `-q` for none); the summary table goes to stdout. The output paths (`-o`,
`--report`) are checked before any work. `--budget` is the seconds of the whole run (reading
the model, the search, the verification and writing the result, not Python's start), given to
its phases by the pipeline's planner (`einsat.pipeline.plan`), as `einsat.optimize(budget=)`;
`--time-limit` is gone (an error naming `--budget`, once its older spelling). `--nodes`,
`--iterations`, `--search-seconds`, `--memory-gb` and `--extractor` are the search's work
(`einsat.egraph.Limits`); `--threads`, `--not-slower-at`, `--profile-budget` and `--recheck` how `--cost cpu`
measures (`einsat.Measure`); `--input-shape` and `--fill-weights` how the model is read
(the command reads it, as `einsat.Load` says). The flags become the run's `einsat.pipeline.Options`
(`options_of`), the same record `einsat.optimize` makes of its keywords (the command calls it
with them); the report's
times are the command's (Python's start, reading, each phase, writing) and its total is the run's
wall time. A first Ctrl-C is acknowledged at once (what the run does now, what it will write): it
stops the search, and the best program found so far is verified and written. A second one stops at
once: the best program verified by then is written if there is one, else the message says that
nothing was written and why (status 130 either way). The output file is written only after
verification passed, and atomically (`einsat.save_onnx`): a failure never leaves a half-written
file. `--report out.json|out.html` keeps the report (the HTML is one self-contained page with its
pictures inline). `--memory-gb` bounds
the memory the run adds (the search stops early past it). A verification that is inconclusive (an
output that does not vary with the inputs, as when the weights are stripped or placeholders) is an
error and nothing is written; the message says why, and `--allow-inconclusive` writes the result
anyway (`--require-proof`, the old spelling of the default, is still accepted). An ONNX node that
nothing can run (a custom domain's op) is an error before the search.

Big models (`einsat.partition`): above `--partition-above` nodes (default 256; 0: always,
`--no-partition`: never) the model is cut into pieces of at most `--piece-nodes` nodes, each
distinct piece optimized once (`--no-reuse`: every piece) by `--parallel N` worker processes
(default: the machine's CPUs; 1: in this process) or, with `--executor ray` (the `distributed`
extra), on the Ray cluster at `--ray-address` (default: Ray's, a local cluster).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from einsat.cli.info import add_model_options, load_model, sizes_of
from einsat.cost.models import COST_MODELS, DEFAULT_COST
from einsat.errors import EinsatError, VerificationError


class _Gone(argparse.Action):
    """An option that is gone: `options_of` refuses it, naming what to use instead (one
    `einsat: error:` line, as every refused flag)."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.gone = f"{option_string} is gone; use {self.new}"


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores like the new one, and says so on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"einsat: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


REPORT_FORMATS = (".json", ".html")


def add_parser(sub) -> None:
    p = sub.add_parser("optimize", help="optimize an ONNX model and write the result",
                       description="Grow an e-graph of the model with einsat's rewrites, extract the "
                                   "cheapest equivalent program under a cost model, check it "
                                   "numerically against the input, and write it as ONNX.")
    p.add_argument("model", type=Path, help="the input ONNX file")
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the optimized ONNX file")
    add_model_options(p)
    p.add_argument("--cost", default=DEFAULT_COST, metavar="NAME",
                   help=f"cost model: {', '.join(COST_MODELS)} (default {DEFAULT_COST})")
    p.add_argument("--device", dest="cost", action=_Deprecated, new="--cost")
    p.add_argument("--profile-budget", type=float, default=None, metavar="S",
                   help="with a measured cost model (--cost cpu): seconds of op profiling at most "
                        "(default 120; timings are cached and reused by later runs)")
    p.add_argument("--recheck", action="store_true",
                   help="with a measured cost model: time the input and the result side by side again "
                        "even when an earlier run kept the verdict on these two programs")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="with --cost cpu: the intra-op threads onnxruntime profiles and measures at, the count "
                        "you will deploy with (default 1; the profile is kept per count)")
    p.add_argument("--not-slower-at", default=None, metavar="N[,N...]",
                   help="with --cost cpu: other intra-op thread counts the file will also run at; a result "
                        "measured faster at --threads is returned only if it is not measured slower beyond noise "
                        "at these too (default: none)")
    p.add_argument("--opset", type=int, default=None, metavar="N",
                   help="the ONNX opset cap of the written file, 13 to 26 (default 26, the newest onnxruntime "
                        "opens): ops are written in that opset's forms (Attention from 23, Gelu from 20, a chain "
                        "below) and the file declares the least opset they need")
    p.add_argument("--budget", type=float, default=None, metavar="S",
                   help="seconds for the whole run (reading, search, extraction, verification and writing "
                        "share it; default: no limit)")
    p.add_argument("--time-limit", dest="gone", metavar="S", action=_Gone,
                   new="--budget S (seconds for the whole run)")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="the e-graph's node limit (default 20000)")
    p.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="rounds of rewriting the search may run (default 10)")
    p.add_argument("--search-seconds", type=float, default=None, metavar="S",
                   help="seconds the search may take before it stops early (default 60, a safety net: the node "
                        "and round limits end it first; --budget bounds it "
                        "too). A search stopped by its nodes or rounds gives the same program on any load; "
                        "one stopped by the clock says so in the report")
    p.add_argument("--memory-gb", type=float, default=None, metavar="GB",
                   help="resident memory the run may add before the search stops early (default 4)")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="write the result even when the verification is inconclusive (an output that does not "
                        "vary with the inputs: it could not have failed); by default that is an error")
    p.add_argument("--require-proof", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.add_argument("--extractor", choices=("ilp", "greedy"), default="ilp", help="extraction method (default ilp)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="fp32",
                   help="bf16 / fp16: convert an fp32 model to half (weights cast once, products with fp32 "
                        "accumulation, statistics in fp32), verified against it; tf32: the fp32 program, "
                        "costed with the GPU's TF32 matrix products (h100 -> h100-tf32; refused for --cost cpu) "
                        "(default fp32; a half model is optimized as it is)")
    p.add_argument("--half-io", action="store_true",
                   help="with --precision bf16/fp16: the written model's inputs and outputs are half too")
    big = p.add_argument_group("big models (einsat.partition)")
    big.add_argument("--partition-above", type=int, default=None, metavar="N",
                     help="partition models of more than N nodes (default 256; 0: always)")
    big.add_argument("--no-partition", action="store_true", help="never partition: one e-graph for the model")
    big.add_argument("--piece-nodes", type=int, default=None, metavar="N",
                     help="the most nodes in a piece (default 64)")
    big.add_argument("--parallel", type=int, default=None, metavar="N",
                     help="optimize pieces in N worker processes (default: the CPUs; 1: in this process)")
    big.add_argument("--executor", choices=("process", "serial", "ray"), default=None,
                     help="where pieces run (default process; ray needs the 'distributed' extra)")
    big.add_argument("--ray-address", default=None, metavar="ADDR",
                     help="a Ray cluster's address (--executor ray; default: Ray's, a local cluster)")
    big.add_argument("--no-reuse", action="store_true", help="optimize every piece, even repeated ones")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="also write the report: FILE.json (data) or FILE.html (tables and pictures); "
                        "default: none")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display, errors only")
    p.set_defaults(handler=cmd_optimize)


def check_writable(path: Path, what: str) -> None:
    """Fail now, not after the optimization, when `path` cannot be written."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise EinsatError(f"{path}: the directory {parent} does not exist (for the {what})")
    if not os.access(parent, os.W_OK):
        raise EinsatError(f"{path}: the directory {parent} is not writable (for the {what})")
    if path.is_dir():
        raise EinsatError(f"{path}: is a directory (for the {what})")


def cmd_optimize(args: argparse.Namespace) -> int:
    import einsat
    from einsat.pipeline.phases import write
    from einsat.progress import ProgressDisplay

    if args.output.resolve() == args.model.resolve():
        raise EinsatError(f"{args.output}: refusing to overwrite the input model")
    check_writable(args.output, "optimized model")
    if args.report is not None:
        if args.report.suffix not in REPORT_FORMATS:
            raise EinsatError(f"--report {args.report}: the file name must end in .json or .html")
        check_writable(args.report, "report")
    from einsat.budget import Budget
    from einsat.pipeline.plan import Planner
    options = options_of(args, None)  # every flag checked before any work
    budget = Budget(args.budget)  # the whole run's, loading included
    planner = Planner(budget)
    t0 = time.perf_counter()
    started = getattr(args, "started", t0)  # when `main` began (the report's total is the run's wall time)
    graph = load_model(args, symbolic=True)  # symbols left unpinned: one program for every size (#40)
    from einsat.runtime.onnx_nodes import check_runnable
    check_runnable(graph, str(args.model))  # before the search, not at the verification
    read = time.perf_counter() - t0
    planner.hold("write", read)  # writing the result takes about what reading took
    if not args.quiet:
        from einsat.cli.target import target_line
        line = target_line(options.target_cost(), options.measuring.threads)
        print(line, file=sys.stderr, flush=True)  # beside the progress
    display = None if args.quiet else ProgressDisplay(sys.stderr)
    stop = _Stop(args, budget, display)
    budget.on_interrupt = _acknowledge(args, display, stop)
    try:
        with budget.interruptible():  # the whole run: a first Ctrl-C during the check lets it finish
            result = einsat.optimize(graph, **options.replace(budget=budget, progress=display).keywords())
    except KeyboardInterrupt:  # a second Ctrl-C: `stop` ran (or runs now), once
        return stop()
    except VerificationError as e:
        if e.status != "inconclusive":
            raise
        first, _, details = str(e).partition("\n")
        raise EinsatError(f"{args.model}: {first} Nothing was written: --allow-inconclusive writes the result "
                          f"anyway.\n{details}") from None
    finally:
        planner.release("write")
        if display is not None:
            display.close()
    # cost "cpu": the file as given, where it is measured faster than einsat's writing (`pipeline.given`)
    from einsat.pipeline import given
    from einsat.pipeline.options import Load
    given.keep_given(result, args.model, options.replace(load=Load(sizes=options.loading.sizes,
                                                                   fill_weights=args.fill_weights)),
                     None if args.budget is None else budget.remaining())

    def save(graph, path):  # einsat.save_onnx read at call time
        if result.given is not None:
            result.save(path)
        else:
            einsat.save_onnx(graph, path, opset=args.opset, contrib=result.contrib)

    wrote = write(result.graph, args.output, planner, save)
    wall_times(result.report, getattr(args, "startup", None), read, wrote, started)
    print(result.report)
    print(f"wrote {args.output}")
    if args.report is not None:
        write_report(result, args.report)
        print(f"wrote {args.report}")
    return 0


def options_of(args: argparse.Namespace, budget=None):
    """The run's `einsat.pipeline.Options` from the command's flags (`budget`: the run's `Budget`,
    default `--budget`'s seconds), each checked with a message naming its flag."""
    from einsat.pipeline import Options

    if getattr(args, "gone", None):
        raise EinsatError(args.gone)
    if args.budget is not None and args.budget <= 0:
        raise EinsatError(f"--budget must be positive, got {args.budget}")
    if args.profile_budget is not None and args.profile_budget < 0:
        raise EinsatError(f"--profile-budget must not be negative, got {args.profile_budget}")
    if args.nodes is not None and args.nodes < 1:
        raise EinsatError(f"--nodes must be positive, got {args.nodes}")
    if args.iterations is not None and args.iterations < 1:
        raise EinsatError(f"--iterations must be positive, got {args.iterations}")
    if args.search_seconds is not None and args.search_seconds <= 0:
        raise EinsatError(f"--search-seconds must be positive, got {args.search_seconds}")
    partition = _partitioning(args)
    if args.memory_gb is not None and args.memory_gb <= 0:
        raise EinsatError(f"--memory-gb must be positive, got {args.memory_gb}")
    if args.half_io and args.precision not in ("bf16", "fp16"):
        raise EinsatError(f"--half-io needs --precision bf16 or fp16, not {args.precision}")
    if args.allow_inconclusive and args.require_proof:
        raise EinsatError("--allow-inconclusive and --require-proof contradict each other")
    if args.threads is not None and args.threads < 1:
        raise EinsatError(f"--threads must be positive, got {args.threads}")
    from einsat.pipeline.options import Load, Measure
    measuring = Measure(threads=args.threads, profile_s=args.profile_budget, recheck=args.recheck,
                        not_slower_at=_thread_counts(args.not_slower_at))
    # (the command reads the model itself, --input-shape and --fill-weights applied: `load_model`)
    return Options(cost=args.cost, limits=_limits(args.nodes, args.memory_gb, args.iterations, args.search_seconds,
                                                  args.extractor),
                   budget=args.budget if budget is None else budget,
                   verify=True if args.allow_inconclusive else "prove",
                   measure=None if measuring == Measure() else measuring, partition=partition,
                   precision=args.precision, half_io=args.half_io, opset=args.opset,
                   load=Load(sizes=sizes) if (sizes := sizes_of(args)) else None)


def wall_times(report, startup: float | None, read: float, write: float, started: float) -> None:
    """The report's times as the command's: Python's start and imports (`startup`, when this
    process is the command), reading the model, `optimize`'s phases, writing the result, and a
    total that is the run's wall time (to the summary's printing)."""
    times = {k: v for k, v in report.times.items() if k != "total"}
    report.times = ({"start": startup} if startup is not None else {}) | {"read": read} | times | {"write": write}
    report.times["total"] = (startup or 0.0) + time.perf_counter() - started


def _acknowledge(args: argparse.Namespace, display, stop):
    """What a Ctrl-C says, at once (`Budget.on_interrupt`, from the Ctrl-C watcher thread): what
    the run does now, what it writes. The second one also ends the run there and then (`stop`)."""
    def say(count: int) -> None:
        if count == 1:
            text = (f"einsat: Ctrl-C: stopping the search; the best program found so far is verified, then written "
                    f"to {args.output}" + (f" (and the report to {args.report})" if args.report else "") +
                    ". Ctrl-C again to stop at once: the best program verified by then is written, if there is one")
        else:
            text = "einsat: Ctrl-C again: stopping now"
        if display is not None:
            display.note(text)
        else:
            print(text, file=sys.stderr, flush=True)
        if count >= 2:
            stop(at_once=True)
    return say


# after a second Ctrl-C, the seconds the main thread has to come back from the step under way (an
# egglog phase runs no Python code) before the process ends itself; what is written is decided
# before, so the clock only chooses between a clean exit and `os._exit`, both with status 130
EXIT_GRACE_S = 1.0


class _Stop:
    """A second Ctrl-C's end of the run, once, from whichever thread hears it first: the best
    verified program written (or why nothing was); status 130. In a process that is the command
    (`args.own_process`), the process ends by itself if the main thread is still in a step that
    runs no Python code `EXIT_GRACE_S` later, so the second Ctrl-C stops it in any phase."""

    def __init__(self, args: argparse.Namespace, budget, display):
        import threading
        self.args, self.budget, self.display = args, budget, display
        self.lock = threading.Lock()
        self.code: int | None = None
        self.timer = None

    def __call__(self, at_once: bool = False) -> int:
        """`at_once`: called as the Ctrl-C arrives; else by the main thread, back from the run."""
        with self.lock:
            if self.code is None:
                if self.display is not None:
                    self.display.close()
                self.code = _interrupted_twice(self.args, self.budget, self.display)
                if at_once and getattr(self.args, "own_process", False):
                    import threading
                    self.timer = threading.Timer(EXIT_GRACE_S, _exit, (self.code,))
                    self.timer.daemon = True
                    self.timer.start()
            if not at_once and self.timer is not None:
                self.timer.cancel()  # the main thread is back: the process ends as usual
        return self.code


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _interrupted_twice(args: argparse.Namespace, budget, display) -> int:
    """After a second Ctrl-C: the best verified program written if the run has one, else why not."""
    import einsat
    if budget.verified is not None:
        einsat.save_onnx(budget.verified, args.output, opset=args.opset)
        print(f"einsat: interrupted twice: wrote the best program verified so far to {args.output} (the run did "
              "not finish: no summary" + (f", no report {args.report}" if args.report else "") + ")",
              file=sys.stderr)
    else:
        where = f" (the run was in its {display.phase} phase)" if display is not None and display.phase else ""
        print(f"einsat: interrupted twice: nothing was written to {args.output}: no program had been verified "
              f"yet{where}; a single Ctrl-C stops the search and writes the best program found so far",
              file=sys.stderr)
    return 130


def write_report(result, path: Path) -> None:
    """The report as JSON data or as one self-contained HTML page, by the file's suffix."""
    if path.suffix == ".json":
        path.write_text(result.report.to_json() + "\n")
    else:
        from einsat.viz.report import report_html
        path.write_text(report_html(result.report, before=result.input, after=result.graph))


def _partitioning(args: argparse.Namespace):
    """`optimize(partition=...)` from the big-model options (None: the defaults; False: never)."""
    import dataclasses

    from einsat.partition import Partitioning

    if args.no_partition:
        return False
    for flag, value in (("--partition-above", args.partition_above), ("--piece-nodes", args.piece_nodes),
                        ("--parallel", args.parallel)):
        if value is not None and value < (0 if flag == "--partition-above" else 1):
            raise EinsatError(f"{flag} must be {'non-negative' if flag == '--partition-above' else 'positive'}, "
                              f"got {value}")
    changes = {k: v for k, v in (("above", args.partition_above), ("piece_nodes", args.piece_nodes),
                                 ("workers", args.parallel), ("executor", args.executor),
                                 ("address", args.ray_address)) if v is not None}
    if args.no_reuse:
        changes["reuse"] = False
    if args.parallel == 1 and args.executor is None:
        changes["executor"] = "serial"
    return dataclasses.replace(Partitioning(), **changes) if changes else None


def _thread_counts(text: str | None) -> tuple[int, ...]:
    """--not-slower-at's "1" or "1,4" as thread counts; a clear error for anything else."""
    if text is None:
        return ()
    try:
        counts = tuple(int(t) for t in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(t < 1 for t in counts):
        raise EinsatError(f"--not-slower-at takes positive thread counts separated by commas (1 or 1,4), not {text!r}")
    return counts


def _limits(nodes: int | None, memory_gb: float | None = None, iterations: int | None = None,
            seconds: float | None = None, extractor: str | None = None):
    given = {"nodes": nodes, "memory_gb": memory_gb, "iterations": iterations, "time_s": seconds,
             "extractor": None if extractor == "ilp" else extractor}
    if all(v is None for v in given.values()):
        return None
    from einsat.egraph.session import Limits
    return Limits(**{k: v for k, v in given.items() if v is not None})
