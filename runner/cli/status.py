"""`madbench status`: a batch's progress and outcome, read from its results directory (running or finished).

Its own group, apart from `madbench run`: it imports neither Ray nor the statistics and the report, so that a quick
look is quick."""

from __future__ import annotations

import json
from pathlib import Path

from madbench.runner.batch_status import batch_status, failure_summary
from madbench.runner.cli.commands import command_parser


def register(sub) -> None:
    p = command_parser(sub, "status")
    p.add_argument("results_dir", help="a batch results directory, e.g. results/rules-35")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    p.set_defaults(func=cmd_status)


def cmd_status(args) -> int:
    s = batch_status(Path(args.results_dir))
    if args.json:
        print(json.dumps(s.model_dump(exclude={"failures"}), indent=1))
        return 0
    updated = "" if s.state.startswith("stopped (driver gone") else f" (updated {s.updated})"
    print(f"batch {s.batch}: {s.state}{updated}; {s.ok + s.failed + s.pending + s.not_needed} runs: "
          f"{s.ok} ok, {s.failed} failed, {s.pending} pending ({len(s.in_flight)} in flight)"
          f"{f', {s.not_needed} not_needed' if s.not_needed else ''}; "
          f"{s.committed} results committed")
    for cfg, c in s.by_config.items():
        print(f"  {cfg:<30} ok {c.ok:>4}  failed {c.failed:>4}  pending {c.pending:>4}"
              + (f"  not_needed {c.not_needed:>4}" if c.not_needed else ""))
    for line in s.looks:
        print(f"  {line}")
    for r in s.in_flight:
        print(f"  in flight {r.run_id} ({r.config} on {r.scenario_id}, since {r.since}): {r.step}")
    if s.failed:
        print(f"  {s.failed} failed:")
        print("\n".join("  " + line for line in failure_summary(s.failures)))
    return 0
