"""`einsat --version`, `python -m einsat.cli` and the console script: one entry point, one version."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import einsat
from einsat.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"einsat {einsat.__version__}\n"


def test_the_version_is_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "einsat.__version__"}


def test_python_m_and_the_console_script_run_main():
    out = subprocess.run([sys.executable, "-m", "einsat.cli", "--version"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout == f"einsat {einsat.__version__}\n"
    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["einsat"]
    module, _, name = script.partition(":")
    assert getattr(importlib.import_module(module), name) is main


def test_every_command_has_its_module_and_handler(capsys):
    names = [c.__name__.rsplit(".", 1)[1] for c in COMMANDS]
    assert names == ["info", "demo", "optimize", "fuzz", "profile", "check"]
    for name in names:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        assert f"usage: einsat {name}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([])
    assert "COMMAND" in capsys.readouterr().err


def test_every_command_describes_itself_and_says_each_options_default():
    """`einsat COMMAND --help` says what the command does and, for each option taking a value,
    what it is when not given (argparse shows neither by itself)."""
    import argparse

    from einsat.cli import parser
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["info", "demo", "optimize", "fuzz", "profile", "check"]
    silent = []
    for name, command in sub.choices.items():
        assert command.description and len(command.description) > 40, f"einsat {name} has no description"
        for action in command._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or action.required \
                    or action.nargs == 0:  # flags (store_true, count, help) have no value to default
                continue
            if "default" not in action.help:
                silent.append(f"einsat {name} {action.option_strings[-1]}: {action.help}")
    assert not silent, "\n".join(silent)
