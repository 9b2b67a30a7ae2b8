"""`madbench report RESULTS_DIR`: write the self-contained report.html."""

from __future__ import annotations

from madbench.eval.report.page import build_report
from madbench.runner.batch_view import check_committed
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import csv_list, number
from madbench.runner.committed import read_committed


def register(sub) -> None:
    p = command_parser(sub, "report")
    p.add_argument("results_dir", help="a results directory written by `madbench run`")
    p.add_argument("--out", help="output file (default RESULTS_DIR/report.html)")
    p.add_argument("--compare", help="comma-separated configs, in column order (default: all)")
    p.add_argument("--correction", choices=["holm", "bh", "none"], default="holm",
                   help="adjust the p of every pair × metric as one family: holm (default), bh or none")
    p.add_argument("--max-traces", type=number(int, ge=0, le=100_000), default=500, help="runs embedded in the trace explorer (default 500)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    read_committed(args.results_dir, "report")  # only committed runs' rows; a running batch said to be a snapshot
    check_committed(args.results_dir)
    path = build_report(args.results_dir, args.out, csv_list(args.compare), args.correction, args.max_traces)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0
