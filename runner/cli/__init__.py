"""The `madbench` command line.

Every subcommand has --help, exits 0 on success and non-zero on error, and
reports bad input as one line on stderr. Unexpected exceptions keep their
traceback: they are bugs, not user errors.

Each command group is one module of this package exposing ``register(sub)``,
which adds its subcommands to the top-level subparsers and sets each one's
``func`` (``args -> exit code``). ``madbench.runner.cli.commands`` lists the groups as
data (module path, commands, one-line descriptions), so start-up imports only
the group that owns the command being run: `madbench --help` and
`madbench --version` import none. Adding a group is one module plus one entry
in ``commands.GROUPS``, whose order is the order of ``madbench --help``.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import NoReturn

from madbench.data.errors import InputError
from madbench.runner.cli.commands import EXAMPLES, GROUPS, Group, command_parser, command_word, group_of
from madbench.runner.exit_codes import EXIT_DISK_FULL, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_NO_RAY
from madbench.runner.ray_address import RayUnavailable

__all__ = ["EXIT_DISK_FULL", "EXIT_INPUT", "GROUPS", "build_parser", "main", "version"]


def version() -> str:
    try:
        return metadata.version("madbench")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """--version, reading the installed version only when asked (not on every start)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"{parser.prog} {version()}\n", sys.stdout)
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors on one line (argparse prints the usage above them); every subcommand's
    parser is one too (``add_parser`` builds them of the top parser's class)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument --"):  # a value out of its bounds or of the wrong type: bad input, as any
            command = self.prog.removeprefix("madbench").strip()  # the CLI's own name is said once, by main
            raise InputError(command or None, message, f"see `{self.prog} --help`")
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(full: Iterable[Group] | None = None) -> argparse.ArgumentParser:
    """The parser tree. ``full``: the groups whose commands get their full arguments (each group's module is
    imported and its ``register`` called); every other command is a bare entry with its one-line description.
    None (the default): every group, the complete tree."""
    full = set(GROUPS if full is None else full)
    parser = _Parser(prog="madbench",
                                     description="Batch runner for multi-agent LLM debate experiments on portfolio allocation.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="run `madbench COMMAND --help` for its options")
    for group in GROUPS:  # in help order
        if group in full:
            importlib.import_module(group.module).register(sub)
        else:
            for name in group.commands:
                command_parser(sub, name)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """A subcommand's --help opens with its one-line description unless it has a longer one of its own, and ends
    with its example (``commands.EXAMPLES``) unless it has an epilog of its own."""
    if parser.epilog is None and " ".join(path) in EXAMPLES:
        parser.epilog = f"example:\n  {EXAMPLES[' '.join(path)]}"
        parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the example as written, not rewrapped
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                if sub.description is None:
                    sub.description = choice.help
                _describe(sub, (*path, choice.dest))


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``argv`` names: `madbench bench scale ...` is bench scale's."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    owner = group_of(command_word(argv))
    parser = build_parser([owner] if owner else [])
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the command they were given to, whose --help lists what it takes
            prog = _command_parser(parser, argv).prog
            parser.exit(EXIT_INPUT, f"{prog}: error: unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)\n")
        # A local Ray this command starts is stopped when it returns (one a caller had started already is left up).
        # A caller's Ray (a notebook's, a test session's) is up before the command: it is not this command's to stop.
        ray = sys.modules.get("ray")
        ours = not getattr(sys.modules.get("madbench.runner.execute"), "_local_ray_started", False) and not (
            ray is not None and ray.is_initialized())
        status = args.func(args)
        execute = sys.modules.get("madbench.runner.execute")  # imported only by the commands that start Ray
        if ours and execute is not None:
            execute.stop_local_ray(quiet=getattr(args, "quiet", False))
        return status
    except InputError as exc:
        print(f"madbench: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # `madbench memo ... | head`
        return 0
    except KeyboardInterrupt:  # before a batch started, or in a command without its own handling
        print("\nmadbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        # a path given on the command line or in a file, of the wrong kind or closed to this user: the input's problem
        fix = {PermissionError: f"make it accessible (chmod u+rwX {exc.filename}) or choose another path",
               IsADirectoryError: "give a file there, not a folder",
               NotADirectoryError: "give a folder there, not a file"}[type(exc)]
        print(f"madbench: error: {exc.filename or ''}: {exc.strerror or exc} (fix: {fix})", file=sys.stderr)
        return EXIT_INPUT
    except RayUnavailable as exc:
        print(f"madbench: error: {exc} (fix: run the same command again once the machine is less busy; nothing ran, "
              f"and committed runs are kept; `ray status` and the logs named above say more)", file=sys.stderr)
        return EXIT_NO_RAY
    except OSError as exc:
        if exc.errno == errno.EROFS:  # an output path on a read-only mount: the input's problem, as a closed folder is
            print(f"madbench: error: {exc.filename or ''}: {exc.strerror or exc} (fix: choose a path on a writable file "
                  "system)", file=sys.stderr)
            return EXIT_INPUT
        if exc.errno != errno.ENOSPC:
            raise
        print(f"madbench: error: {exc.strerror or exc}: {exc.filename or ''}\n"
              "  Committed results are intact (every file is written whole or not at all). "
              "Free some space, then run the same command again to resume.", file=sys.stderr)
        return EXIT_DISK_FULL
