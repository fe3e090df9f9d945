import pytest

from einsat.cli import main, parser
from einsat.cost.models import COST_MODELS, DEFAULT_COST


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "out.onnx")]) == 2
    assert "nope.onnx: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()


def test_refuses_to_overwrite_the_input(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    assert main(["optimize", str(model), "-o", str(model)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert model.read_bytes() == b"not a model"


def test_unreadable_model_leaves_no_output(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    assert main(["optimize", str(model), "-o", str(tmp_path / "out.onnx"), "--quiet"]) == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()


def test_extractor_choices_are_checked(tmp_path):
    with pytest.raises(SystemExit):
        main(["optimize", "m.onnx", "-o", "o.onnx", "--extractor", "anneal"])


def test_cost_names_the_cost_model_and_device_is_its_old_name(tmp_path, capsys):
    args = parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx"])
    assert args.cost == DEFAULT_COST
    assert parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", "--cost", "h100-tf32"]).cost == "h100-tf32"
    assert parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", "--device", "h200"]).cost == "h200"
    assert "--device is deprecated; use --cost" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    assert "--cost NAME" in (shown := capsys.readouterr().out) and "--device" not in shown
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"), "--cost", "a100"]) == 2
    err = capsys.readouterr().err
    assert "unknown cost model 'a100'" in err and all(name in err for name in COST_MODELS)
    assert not (tmp_path / "o.onnx").exists()


def small_model(path):
    import einsat
    from benchmarks.workloads.layers import Net
    from benchmarks.workloads.resnet import basic_block
    net = Net("block")
    x = net.b.input("x", (1, 8, 10, 10))
    graph = net.build(basic_block(net, x, 8, 1))
    einsat.save_onnx(graph, path)
    return graph


def stripped_model(path) -> list[str]:
    """The small model as `scripts/export_torch_models.py` commits models: every weight a graph
    input, named by the `einsat.stripped_weights` metadata entry; returns their names."""
    import json

    import onnx
    from onnx import helper
    small_model(path)
    m = onnx.load(path)
    names = [i.name for i in m.graph.initializer]
    m.graph.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                         for i in m.graph.initializer)
    del m.graph.initializer[:]
    helper.set_model_props(m, {"einsat.stripped_weights": json.dumps(names)})
    onnx.save(m, path)
    return names


def custom_op_model(path, scale: float = 1.0) -> None:
    """relu(MyFancyOp(x @ w + x @ w)): the middle node of a domain (com.example) that neither
    onnxruntime nor onnx.reference implements; the sum gives the search something to rewrite."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("MatMul", ["x", "w"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h", "h2"], ["s"], name="sum"),
             helper.make_node("MyFancyOp", ["s"], ["f"], name="fancy", domain="com.example", scale=scale),
             helper.make_node("Relu", ["f"], ["y"], name="relu")]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    g = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", f32, [4, 8])],
                          [helper.make_tensor_value_info("y", f32, [4, 8])], initializer=[w],
                          value_info=[helper.make_tensor_value_info("f", f32, [4, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                                  helper.make_opsetid("com.example", 1)]), path)


def test_optimize_writes_a_verified_model_and_prints_a_summary(tmp_path, capsys):
    import numpy as np

    import einsat
    small_model(tmp_path / "block.onnx")
    out = tmp_path / "fast.onnx"
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(out), "--cost", "h200",
                 "--budget", "60"]) == 0  # 1.4 s idle; a clean-checkout run at load 6 ran out of 6 s
    captured = capsys.readouterr()
    assert "modeled cost (h200: the datasheet roofline, µs)" in captured.out
    assert "verification: proved" in captured.out
    assert f"wrote {out}" in captured.out
    assert "saturate" in captured.err and "extract" in captured.err and "\r" not in captured.err
    before, after = einsat.load_onnx(tmp_path / "block.onnx"), einsat.load_onnx(out)
    # fused convs export as standard ONNX (Conv, Add, Relu); the batchnorms are folded away
    assert "batchnorm" in before.op_counts() and "batchnorm" not in after.op_counts()
    x = np.random.default_rng(0).standard_normal((1, 8, 10, 10)).astype(np.float32)
    want, got = einsat.run(before, {"x": x}), einsat.run(after, {"x": x})
    for name in before.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_a_failed_verification_writes_nothing(tmp_path, capsys, monkeypatch):
    import importlib

    from einsat.egraph.data import EClass, EGraphData, ENode
    from einsat.ir import Op
    from einsat.pipeline.report import SaturationSummary
    graph = small_model(tmp_path / "block.onnx")
    name = graph.outputs[0]
    t = graph.types[name]
    broken = EGraphData({0: EClass(0, [ENode(None, leaf=("input", "x"))], t),
                         1: EClass(1, [ENode(Op.RELU, (0,))], t)}, [1], [name], {"x": t}, {})
    monkeypatch.setattr(importlib.import_module("einsat.pipeline.phases"), "saturate",
                        lambda *args: (broken, SaturationSummary(2, 2, "saturated")))
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(out), "--cost", "h100", "--quiet"]) == 2
    assert "differs from" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "block.onnx"]


def test_version(capsys):
    import einsat
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"einsat {einsat.__version__}"


@pytest.mark.parametrize("flag", ["-o", "--report"])
def test_output_paths_are_checked_before_any_work(tmp_path, capsys, monkeypatch, flag):
    import importlib
    small_model(tmp_path / "block.onnx")
    monkeypatch.setattr(importlib.import_module("einsat.pipeline.phases"), "saturate",
                        lambda *a: pytest.fail("optimized before checking the output path"))
    out, report = tmp_path / "out.onnx", tmp_path / "r.html"
    missing = tmp_path / "missing" / "dir" / ("out.onnx" if flag == "-o" else "r.html")
    args = ["optimize", str(tmp_path / "block.onnx"), "-o", str(missing if flag == "-o" else out),
            "--report", str(missing if flag == "--report" else report), "-q"]
    assert main(args) == 2
    assert "does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block.onnx"]


def test_report_format_is_checked(tmp_path, capsys):
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"),
                 "--report", str(tmp_path / "r.txt")]) == 2
    assert ".json or .html" in capsys.readouterr().err


def test_symbolic_dims_are_fixed_with_input_shape(tmp_path, capsys):
    """The shell user's way (onnxsim's habit); without it the program is one for every batch (#40)."""
    import onnx
    small_model(tmp_path / "block.onnx")
    m = onnx.load(tmp_path / "block.onnx")
    del m.graph.value_info[:]  # an exporter with a symbolic batch dim
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(m, tmp_path / "sym.onnx")
    assert main(["optimize", str(tmp_path / "sym.onnx"), "-o", str(tmp_path / "every.onnx"), "-q", "--nodes", "500",
                 "--dim", "batch=1,3"]) == 0
    written = onnx.load(tmp_path / "every.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in written] == ["batch", 8, 10, 10]
    assert main(["optimize", str(tmp_path / "sym.onnx"), "-o", str(tmp_path / "o.onnx"), "-q",
                 "--input-shape", "x=2,8,10,10", "--nodes", "500", "--cost", "h200",
                 "--report", str(tmp_path / "r.json")]) == 0
    import json

    import einsat
    assert einsat.load_onnx(tmp_path / "o.onnx").types["x"].shape == (2, 8, 10, 10)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["model"] == "h200" and data["verified"] and data["saturation"]["node_limit"] == 500
    assert data["saturation"]["phases"] and all("nodes" in p for p in data["saturation"]["phases"])


def test_html_report_is_one_self_contained_file(tmp_path, capsys):
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"), "-q",
                 "--device", "h100", "--report", str(tmp_path / "r.html")]) == 0
    assert_self_contained_report(tmp_path / "r.html")


def assert_self_contained_report(path):
    """One HTML file, its pictures inline SVG: nothing it refers to lies outside it."""
    import re
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count("<svg") >= 3  # programs, growth, cost bars, times
    assert not re.search(r"""(src|href)=["'](?!#|data:)""", html), "the report refers to another file"
    assert "modeled cost" in html and "verification" in html


@pytest.mark.slow  # ~5 s: a whole bounded search on the demo model
def test_fill_weights_on_optimize(tmp_path, capsys):
    from einsat.cli.demo import demo_model_path
    # bounded by work alone (a 4 s budget on a loaded machine returned the input unsearched, "identical")
    assert main(["optimize", str(demo_model_path()), "-o", str(tmp_path / "o.onnx"), "-q", "--fill-weights",
                 "random", "--extractor", "greedy", "--nodes", "3000", "--iterations", "1"]) == 0
    assert "verification: proved" in capsys.readouterr().out


def test_a_closed_pipe_ends_quietly(tmp_path):
    import subprocess
    import sys
    small_model(tmp_path / "block.onnx")
    code = ("import sys; from einsat.cli import main; sys.exit(main(['info', sys.argv[1]]))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "block.onnx")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0 and "Traceback" not in err and "BrokenPipe" not in err


def test_ctrl_c_stops_the_search_and_writes_the_best_program(tmp_path):
    """SIGINT during saturation: no traceback, a verified program written, the report says so."""
    import signal
    import subprocess
    import sys
    import time

    from einsat.cli.demo import demo_model_path
    out = tmp_path / "o.onnx"
    proc = subprocess.Popen([sys.executable, "-m", "einsat.cli", "optimize", str(demo_model_path()), "-o", str(out),
                             "--fill-weights", "random", "--budget", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line, start = "", time.monotonic()
    while "step" not in line and time.monotonic() - start < 60:  # saturation has begun
        line = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stdout and "verification: proved" in stdout and out.is_file(), stdout




def test_cost_cpu_profiles_and_reports_measured_figures(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    import einsat
    from einsat.ir import GraphBuilder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    b = GraphBuilder("tt")
    x = b.input("x", (16, 24))
    t = b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0))
    einsat.save_onnx(b.build(b.relu(b.matmul(t, b.weight("w", (24, 8))))), tmp_path / "m.onnx")
    args = ["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "--cost", "cpu", "--quiet",
            "--profile-budget", "60"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "measured-cpu" in out and "from the cache" in out and (tmp_path / "o.onnx").exists()
    assert any((tmp_path / "cache" / "einsat" / "profiles").iterdir())
    assert main(args) == 0
    assert " 0 measured now" in capsys.readouterr().out  # the second run times nothing


def test_profile_budget_must_not_be_negative(tmp_path, capsys):
    (tmp_path / "m.onnx").write_bytes(b"x")
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "--profile-budget", "-1"]) == 2
    assert "--profile-budget" in capsys.readouterr().err


# the repository root (the subprocess imports this checkout)
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_an_inconclusive_verification_is_refused_unless_allowed_and_memory_is_checked(tmp_path, capsys):
    import einsat
    from tests.verify.test_informative import constant
    einsat.save_onnx(constant(1.0), tmp_path / "const.onnx")  # softmax of a constant: 1/16 on any input
    out = tmp_path / "out.onnx"
    args = ["optimize", str(tmp_path / "const.onnx"), "-o", str(out), "--quiet"]
    for refused in (args, [*args, "--require-proof"]):  # the default, and its old explicit flag
        assert main(refused) == 2
        err = capsys.readouterr().err
        assert "inconclusive" in err and "--allow-inconclusive" in err and not out.exists()
    assert "one value in every element" in err  # its 4x16 bias, all 1.0: a placeholder weight?
    assert main([*args, "--allow-inconclusive", "--memory-gb", "0"]) == 2
    assert "--memory-gb must be positive" in capsys.readouterr().err
    assert main([*args, "--allow-inconclusive", "--memory-gb", "2"]) == 0
    text = capsys.readouterr().out
    assert "verification: INCONCLUSIVE" in text and "limit 2 GB" in text and out.is_file()


def test_the_budget_holds_back_the_writing_of_the_result(tmp_path, monkeypatch):
    """--budget covers reading and writing the model: the search sees the writing's share
    (as long as reading took) as spent, and it is given back before the file is written."""
    import einsat
    small_model(tmp_path / "block.onnx")
    real_optimize, real_save = einsat.optimize, einsat.save_onnx
    seen = {}

    def optimize(graph, **kw):
        seen["budget"], seen["held while optimizing"] = kw["budget"], kw["budget"].reserved
        return real_optimize(graph, **kw)

    def save(graph, path, **kw):
        seen["held while writing"] = seen["budget"].reserved
        return real_save(graph, path, **kw)

    monkeypatch.setattr(einsat, "optimize", optimize)  # the command reads both at call time
    monkeypatch.setattr(einsat, "save_onnx", save)
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"), "--budget", "30",
                 "-q"]) == 0
    assert seen["held while optimizing"] > 0 and seen["held while writing"] == 0
    assert (tmp_path / "o.onnx").exists()


def test_a_model_without_its_weights_is_refused_naming_fill_weights(tmp_path, capsys):
    """Stripped weights drawn as random inputs make the outputs NaN on every draw: a verification
    that cannot fail. The command writes nothing and says which flag gives the weights values."""
    stripped_model(tmp_path / "s.onnx")
    out = tmp_path / "o.onnx"
    # one round of rewriting, the clock far off: the search ends by work on any load (#27)
    args = ["optimize", str(tmp_path / "s.onnx"), "-o", str(out), "-q", "--nodes", "500", "--iterations", "1",
            "--search-seconds", "600"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "inconclusive" in err and "10 stripped weights" in err
    assert "--fill-weights random" in err and "--allow-inconclusive" in err
    assert not out.exists()
    assert main([*args, "--allow-inconclusive"]) == 0  # asked for: written, and the report says it
    assert "verification: INCONCLUSIVE" in capsys.readouterr().out and out.is_file()
    out.unlink()
    assert main([*args, "--fill-weights", "random"]) == 0
    assert "verification: proved" in capsys.readouterr().out and out.is_file()


def test_the_search_limits_are_flags_and_reach_the_run(tmp_path, capsys):
    """--iterations and --search-seconds set saturation's own bounds (the ones a test needs to make
    a run end by work rather than by the clock); nonsense is refused before any work."""
    from einsat.cli import parser
    from einsat.cli.optimize import options_of
    parse = parser().parse_args
    options = options_of(parse(["optimize", "m.onnx", "-o", "o.onnx", "--iterations", "3", "--search-seconds", "90.5"]))
    assert (options.limits.iterations, options.limits.time_s) == (3, 90.5)
    from einsat.egraph.session import Limits
    assert options.limits.nodes == Limits().nodes == 20_000  # the rest keep their defaults
    assert options_of(parse(["optimize", "m.onnx", "-o", "o.onnx"])).limits is None
    small_model(tmp_path / "block.onnx")
    for flag, value in (("--iterations", "0"), ("--search-seconds", "0"), ("--search-seconds", "-1")):
        assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"), flag, value]) == 2
        assert f"{flag} must be positive" in capsys.readouterr().err
        assert not (tmp_path / "o.onnx").exists()


def test_an_op_no_runtime_implements_is_refused_before_the_search(tmp_path, capsys):
    custom_op_model(tmp_path / "c.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(tmp_path / "c.onnx"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"einsat: error: {tmp_path / 'c.onnx'}: ")
    assert "'fancy'" in err and "MyFancyOp" in err and "'com.example'" in err and "register_onnx_op" in err
    assert "NotImplementedError" not in err and "saturat" not in err and "e-graph" not in err  # no search ran
    assert not out.exists()
