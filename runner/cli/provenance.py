"""`madbench replay`, `madbench diff` and `madbench export`: checking, comparing and sharing results."""

from __future__ import annotations

import json

from madbench.runner.cli.commands import command_parser
from madbench.runner.diff import diff, lines
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.runner.export import export
from madbench.runner.replay import replay

#: Differences printed before the rest are counted only.
SHOWN = 50


def register(sub) -> None:
    p = command_parser(sub, "replay")
    p.add_argument("results_dir", help="a batch results directory, e.g. results/rules-35")
    p.add_argument("--cache-dir", help="the response cache the results were made with (default: the one the manifest "
                                       "records, when it is there); replay reads it and never writes it")
    p.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    p.set_defaults(func=cmd_replay)

    p = command_parser(sub, "diff")
    p.add_argument("a", help="a batch results directory, or one run: a run directory of `madbench debate --out`, "
                             "or RESULTS:RUN_ID for a run of a batch")
    p.add_argument("b", help="the other, of the same kind")
    p.add_argument("--json", action="store_true", help="print the differences as one JSON object")
    p.set_defaults(func=cmd_diff)

    p = command_parser(sub, "export")
    p.add_argument("results_dir", help="a batch results directory, e.g. results/rules-35")
    p.add_argument("--format", required=True, choices=["inspect", "jsonl"], help="inspect: one inspect_ai eval log per "
                   "config (open with `inspect view --log-dir OUT`); jsonl: one self-describing record per run")
    p.add_argument("--out", help="output directory (default RESULTS/export/FORMAT)")
    p.set_defaults(func=cmd_export)


def cmd_replay(args) -> int:
    r = replay(args.results_dir, args.cache_dir)
    if args.json:
        print(json.dumps({"identical": r.identical, "runs": r.runs, "provider_requests": r.provider_requests,
                          "cached_answers_checked": r.cached_answers_checked, "byte_identical": r.byte_identical,
                          "differences": [d.__dict__ for d in r.differences]}, indent=1, default=str))
    else:
        print(f"replayed {r.runs} runs from their traces ({r.cached_answers_checked} cached answers checked, "
              f"{r.provider_requests} provider requests)")
        if r.identical:
            print("identical")
        for d in r.differences[:SHOWN]:
            print(d.line())
        if len(r.differences) > SHOWN:
            print(f"... and {len(r.differences) - SHOWN} more differences")
    return 0 if r.identical else EXIT_RUNS_FAILED


def cmd_diff(args) -> int:
    d = diff(args.a, args.b)
    if args.json:
        print(json.dumps(d, indent=1, default=str))
    else:
        print("\n".join(lines(d)))
    return 0


def cmd_export(args) -> int:
    written = export(args.results_dir, args.format, args.out)
    print(f"wrote {len(written)} file(s): " + ", ".join(str(p) for p in written))
    return 0
