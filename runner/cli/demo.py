"""`madbench demo`: the main job on the embedded defaults (the logic lives in runner.demo)."""

from __future__ import annotations

from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import CACHE_DIR_HELP, add_pack_args, check_out
from madbench.runner.cli.run import print_run
from madbench.runner.demo import run_demo


def register(sub) -> None:
    p = command_parser(sub, "demo")
    # --results, as `madbench run` spells the same folder; --out kept for the scripts that use it
    p.add_argument("--results", "--out", dest="out", default="results",
                   help="parent of the batches' results directories (default results)")
    p.add_argument("--no-local", action="store_true", help="skip the embedded language model's batch (quickstart)")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    add_pack_args(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    check_out(args.out, "--results")  # an empty one would write the batches into the current folder
    return run_demo(args.out, args.no_local, args.pack, args.evidence, args.cache_dir, print_run)
