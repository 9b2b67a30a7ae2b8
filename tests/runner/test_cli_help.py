"""The parser tree: every command and argument documented, one registry of command groups, --version;
start-up imports only the group that owns the command being run."""

import argparse
import importlib
import json
import pkgutil
import subprocess
import sys
from importlib import metadata

import pytest

import madbench.runner.cli
from madbench.runner.cli import GROUPS, build_parser, main
from madbench.runner.cli.commands import COMMANDS, command_word, group_of

TOP_LEVEL = {"demo", "run", "status", "data", "scenarios", "memo", "debate", "trace", "backtest", "backtest-quarters", "rescore",
             "stats", "power", "probe", "leakage", "report", "replay", "diff", "export", "llm", "cache", "model", "sim", "bench"}


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for the root and every subcommand, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def documented(text: str | None) -> bool:
    return bool(text and text.strip()) and text != argparse.SUPPRESS


def test_every_subcommand_and_argument_has_help():
    missing = []
    for path, parser in walk(build_parser()):
        where = " ".join(("madbench", *path))
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not documented(action.help):
                missing.append(f"{where}: {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{where} {choice.dest}: no one-line description"
                            for choice in action._choices_actions if not documented(choice.help)]
    assert not missing, "\n".join(missing)


def test_every_leaf_command_has_a_function_and_the_tree_is_complete():
    paths = []
    for path, parser in walk(build_parser()):
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            assert callable(parser.get_default("func")), path
            paths.append(path)
    assert {p[0] for p in paths} == TOP_LEVEL
    assert ("sim", "serve") in paths and ("data", "check") in paths and ("data", "fetch") in paths
    assert not any("import-paper" in p for p in paths)  # removed with its module


def test_one_registry_of_groups_each_with_one_register_function():
    assert len(GROUPS) == len({g.module for g in GROUPS})
    for group in GROUPS:
        module = importlib.import_module(group.module)
        assert group.module.startswith(("madbench.runner.cli.", "madbench.sim.cli", "madbench.bench.cli"))
        assert callable(module.register)
        assert [n for n in vars(module) if n.startswith("register")] == ["register"]
    # every command-group module of the package is in the registry
    modules = {f"madbench.runner.cli.{m.name}" for m in pkgutil.iter_modules(madbench.runner.cli.__path__)}
    modules -= {"madbench.runner.cli.common", "madbench.runner.cli.commands", "madbench.runner.cli.__main__",
                 "madbench.runner.cli.orphan_child"}  # an entry point (the demo's simulated provider), no group
    assert {g.module for g in GROUPS} == modules | {"madbench.sim.cli", "madbench.bench.cli"}
    assert set(COMMANDS) == TOP_LEVEL and sum(len(g.commands) for g in GROUPS) == len(COMMANDS)  # no command in two groups


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.module)
def test_each_group_registers_exactly_its_registry_commands_with_their_descriptions(group):
    sub = argparse.ArgumentParser(prog="madbench").add_subparsers(dest="command")
    importlib.import_module(group.module).register(sub)
    assert list(sub.choices) == list(group.commands)  # nothing missing, nothing unlisted, in help order
    for choice in sub._choices_actions:
        assert choice.help == group.commands[choice.dest], choice.dest
        assert sub.choices[choice.dest].description == group.commands[choice.dest], choice.dest


def test_the_top_level_help_is_the_same_without_importing_any_group():
    assert build_parser([]).format_help() == build_parser().format_help()


def test_the_command_word_picks_its_group():
    assert command_word(["--version"]) is None and command_word([]) is None
    assert command_word(["--help", "status", "x"]) == "status"
    assert group_of("status").module == "madbench.runner.cli.status" and group_of("trace").module == "madbench.runner.cli.debate"
    assert group_of("nope") is None and group_of(None) is None


STARTUP = """
import json, sys
from madbench.runner.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
groups = {%s}
print(json.dumps({"groups": sorted(groups & set(sys.modules)), "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.parametrize("argv, groups", [(["--help"], []), (["--version"], []), (["run", "--help"], ["madbench.runner.cli.run"]),
                                          (["trace", "show", "--help"], ["madbench.runner.cli.debate"])], ids=" ".join)
def test_start_up_imports_only_the_group_of_the_command(argv, groups):
    """A behaviour test, not a timing one: a fresh interpreter, then which modules parsing left loaded."""
    code = STARTUP % ", ".join(repr(g.module) for g in GROUPS)
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.splitlines()[-1])
    assert loaded["groups"] == groups
    if not groups:
        assert not loaded["pandas"]


def test_an_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["no-such-command"])
    assert exit_.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


@pytest.mark.parametrize("path", [p for p, _ in walk(build_parser())], ids=lambda p: " ".join(p) or "madbench")
def test_help_of_every_command_prints_usage(path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: madbench")


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"madbench {metadata.version('madbench')}\n"


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"madbench {metadata.version('madbench')}\n"
    out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "sim " in out.stdout and "usage: madbench" in out.stdout


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    assert "required: COMMAND" in capsys.readouterr().err
