"""`madbench bench`: one subcommand per benchmark, each with its own options only, and every command's --help ends
with an example that parses."""

import argparse
import shlex

import pytest

from madbench.bench.cli import BENCHMARKS, benchmark
from madbench.runner.cli import build_parser, main


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}


def test_bench_help_lists_every_benchmark(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in BENCHMARKS)


def test_a_benchmarks_help_shows_only_its_own_options(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "scale", "--help"])
    out = capsys.readouterr().out
    assert "--runs" in out and "--rpm" not in out and "--experiments" not in out and "--price-model" not in out


def test_an_option_of_another_benchmark_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "scale", "--experiments", "100"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unrecognized arguments: --experiments 100" in err
    assert "(see `madbench bench scale --help`)" in err  # the command it was given to, not the top level


def test_every_benchmark_module_has_the_interface():
    for name in BENCHMARKS:
        module = benchmark(name)
        assert callable(module.add_arguments) and callable(module.main), name
        assert module.EXAMPLE.startswith(f"madbench bench {name}"), name


def test_results_is_spelled_as_run_spells_it_and_the_old_spelling_still_works():
    parser = build_parser()
    for argv in (["bench", "cost", "--results", "x"], ["bench", "cost", "--results-dir", "x"]):
        assert parser.parse_args(argv).results_dir == "x"
    assert parser.parse_args(["run", "b.yaml", "--results", "x"]).results_dir == "x"
    assert parser.parse_args(["demo", "--results", "x"]).out == parser.parse_args(["demo", "--out", "x"]).out == "x"


@pytest.mark.parametrize("path", [p for p, _ in walk(build_parser())], ids=lambda p: " ".join(p) or "madbench")
def test_every_commands_help_ends_with_an_example_that_parses(path, capsys):
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    out = capsys.readouterr().out
    assert "\nexample:\n  madbench" in out, f"madbench {' '.join(path)} --help has no example"
    example = out.split("\nexample:\n  ", 1)[1].splitlines()[0]
    argv = shlex.split(example)[1:]
    assert argv[: len(path)] == list(path), f"the example of {path} runs another command: {example}"
    if not any(isinstance(a, argparse._SubParsersAction) for a in dict(walk(build_parser()))[path]._actions):
        build_parser().parse_args(argv)  # a leaf's example is a valid command line (argparse exits 2 otherwise)
