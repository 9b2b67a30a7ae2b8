"""The `madbench` command line.

Every subcommand has --help, exits 0 on success and non-zero on error, and
reports bad input as one line on stderr. Unexpected exceptions keep their
traceback: they are bugs, not user errors.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

from eval.errors import InputError

EXIT_INPUT = 2
EXIT_DISK_FULL = 3


def _pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pack", help="data pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
    p.add_argument("--evidence", action="append", metavar="DIR",
                   help="attach an evidence directory (filings, earnings_calls, news_sentiment, asset_features); repeatable; else $MADBENCH_EVIDENCE")


def _load_pack(args):
    from eval.market.pack import load_pack, resolve_evidence_dirs, resolve_pack_dir
    return load_pack(resolve_pack_dir(args.pack), resolve_evidence_dirs(args.evidence))


# ---------------------------------------------------------------- data

def cmd_data_check(args) -> int:
    from eval.market.check import check_pack, format_report
    from eval.market.pack import resolve_pack_dir
    report = check_pack(resolve_pack_dir(args.pack))
    print(format_report(report))
    if not report.ok:
        raise InputError(report.root, f"{len(report.problems)} problem(s) found; first: {report.problems[0]}", "fix the listed problems in the pack")
    return 0


def cmd_data_fetch(args) -> int:
    from eval.market.fetch import fetch_pack
    out = fetch_pack([t.strip() for t in args.tickers.split(",") if t.strip()], args.start, args.end, args.out, args.cache_dir)
    print(f"wrote pack {out}")
    return 0


def cmd_data_import_paper(args) -> int:
    from eval.market.paper import build_paper_pack
    out, added = build_paper_pack(args.market, args.paper, args.out)
    print(f"wrote pack {out} (added from the paper's closes: {', '.join(added) or 'none'})")
    return 0


# ---------------------------------------------------------------- scenarios and memo

def cmd_scenarios_make(args) -> int:
    from debate.scenario import dump_scenarios
    from debate.scenario_gen import draw_scenarios, draw_stats
    from eval.market.calendar import quarter_range
    pack = _load_pack(args)
    scenarios = draw_scenarios(pack, quarter_range(args.quarters), args.count, args.min_tickers, args.max_tickers, args.seed)
    stats = draw_stats(scenarios, pack.sector)
    header = (f"# Drawn by: madbench scenarios make --quarters {args.quarters} --count {args.count} "
              f"--min-tickers {args.min_tickers} --max-tickers {args.max_tickers} --seed {args.seed}\n"
              + "".join(f"# {line}\n" for line in stats.format().splitlines()))
    if args.out:
        dump_scenarios(scenarios, args.out, header)
        print(f"wrote {len(scenarios)} scenarios to {args.out}")
    print(stats.format())
    return 0


def cmd_memo(args) -> int:
    from debate.memo import build_memo
    from debate.scenario import find_scenario, load_scenarios
    scenarios = load_scenarios(args.scenarios)
    i, scenario = find_scenario(scenarios, args.scenario_id, args.scenarios)
    memo = build_memo(scenario, _load_pack(args), where=f"{args.scenarios}: scenarios[{i}]")
    sys.stdout.write(memo.to_json() + "\n" if args.json else memo.text)
    return 0


# ---------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="madbench", description="Batch runner for multi-agent LLM debate experiments on portfolio allocation.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    data = sub.add_parser("data", help="market data packs: check, fetch, import the paper's data")
    dsub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    p = dsub.add_parser("check", help="validate a pack (schema, duplicates, gaps, coverage) and print a coverage summary")
    p.add_argument("--pack", help="pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
    p.set_defaults(func=cmd_data_check)
    p = dsub.add_parser("fetch", help="build a pack online from yfinance and FRED (needs internet)")
    p.add_argument("--tickers", required=True, help="comma-separated symbols; SPY is always added")
    p.add_argument("--start", required=True, help="first date, YYYY-MM-DD")
    p.add_argument("--end", required=True, help="last date, YYYY-MM-DD")
    p.add_argument("--out", required=True, help="new pack directory")
    p.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/madbench/raw"), help="raw download cache (default ~/.cache/madbench/raw)")
    p.set_defaults(func=cmd_data_fetch)
    p = dsub.add_parser("import-paper", help="build a pack covering the paper's 35 scenarios (market pack + the paper's data)")
    p.add_argument("--market", required=True, help="the market pack, e.g. ../shared/data/market")
    p.add_argument("--paper", required=True, help="the paper's data, e.g. ../shared/data/paper")
    p.add_argument("--out", required=True, help="new pack directory")
    p.set_defaults(func=cmd_data_import_paper)

    sc = sub.add_parser("scenarios", help="scenario files")
    ssub = sc.add_subparsers(dest="scenarios_command", required=True, metavar="ACTION")
    p = ssub.add_parser("make", help="draw seeded random scenarios spread over quarters and sectors")
    p.add_argument("--quarters", required=True, help="inclusive range, e.g. 2021Q4:2025Q3")
    p.add_argument("--count", type=int, default=35)
    p.add_argument("--min-tickers", type=int, default=3)
    p.add_argument("--max-tickers", type=int, default=35)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="YAML file to write (else only the statistics are printed)")
    _pack_args(p)
    p.set_defaults(func=cmd_scenarios_make)

    p = sub.add_parser("memo", help="print the point-in-time memo of one scenario")
    p.add_argument("scenario_id")
    p.add_argument("--scenarios", required=True, help="scenario YAML file")
    p.add_argument("--json", action="store_true", help="print the evidence items as JSON instead of the text")
    _pack_args(p)
    p.set_defaults(func=cmd_memo)

    _add_eval_commands(sub)
    _add_bench_commands(sub)
    from runner.llm_cli import add_llm_commands
    add_llm_commands(sub)
    from runner.debate_cli import add_debate_commands
    add_debate_commands(sub, _pack_args)
    from runner.score_cli import add_score_commands
    add_score_commands(sub)
    from runner.run_cli import add_run_commands
    add_run_commands(sub, _pack_args)
    from runner import report_cli, stats_cli
    stats_cli.add_parsers(sub)
    report_cli.add_parsers(sub)
    return parser


def _add_eval_commands(sub) -> None:
    p = sub.add_parser("backtest", help="hold an allocation through a quarter and print its metrics")
    p.add_argument("--quarter", required=True, help="invest quarter, e.g. 2023Q2")
    p.add_argument("--tickers", required=True, help="comma-separated universe")
    p.add_argument("--weights", default=None, help="equal | ivol | minvar | FILE.json ({ticker: weight})")
    p.add_argument("--positions", help="FILE.json of share counts {ticker: shares}, instead of --weights")
    p.add_argument("--cash", type=float, default=0.0, help="cash in USD beside --positions")
    p.add_argument("--rf", default="dff", choices=["dff", "dtb3", "0"], help="risk-free rate for cash and Sharpe (default dff)")
    p.add_argument("--capital", type=float, default=100_000.0, help="starting cash in USD (default 100000)")
    p.add_argument("--allow-cash", action="store_true", help="weights may sum to less than 1; the rest stays in cash")
    p.add_argument("--whole-shares", action="store_true", help="buy whole shares only; the remainder stays in cash")
    p.add_argument("--baselines", action="store_true", help="also print the equal, ivol, minvar and SPY baselines")
    p.add_argument("--json", action="store_true", help="print the metrics object as JSON")
    _pack_args(p)
    p.set_defaults(func=cmd_backtest)

    p = sub.add_parser("demo", help="the main job on the embedded defaults: the rules-35 and quickstart batches")
    p.add_argument("--scenarios", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default="results", help="parent of the batches' results directories (default results)")
    p.add_argument("--no-local", action="store_true", help="skip the embedded language model's batch (quickstart)")
    p.add_argument("--cache-dir", help="LLM response cache (else $MADBENCH_CACHE_DIR, else ~/.cache/madbench/llm)")
    _pack_args(p)
    p.set_defaults(func=cmd_demo)


def _add_bench_commands(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: memo, backtest, gateway, runner, throughput against a simulated provider, cached replay")
    p.add_argument("what", choices=["memo", "backtest", "gateway", "runner", "throughput", "cache"])
    p.add_argument("--scenarios", default=str(Path(__file__).resolve().parents[1] / "configs" / "scenarios" / "market-35.yaml"),
                   help="scenario file for `bench memo`, `throughput` and `cache` (default configs/scenarios/market-35.yaml)")
    p.add_argument("--n", type=int, default=10_000, help="backtests for `bench backtest` (default 10000); calls for `bench gateway` (at most 2000)")
    p.add_argument("--runs", type=int, default=100, help="runs for `throughput` and `cache` (3-agent, 1-round debates with CRIT; default 100)")
    p.add_argument("--rpm", type=float, default=600, help="`throughput`: requests/min the simulated provider allows (default 600)")
    p.add_argument("--tpm", type=float, help="`throughput`: tokens/min the simulated provider allows (default: none)")
    p.add_argument("--latency-median", type=float, default=2.0, help="`throughput`: median provider latency in s, lognormal (default 2)")
    p.add_argument("--concurrency", type=int, default=32, help="`throughput`: runs in flight (default 32)")
    p.add_argument("--serial-runs", type=int, default=3, help="`throughput`: runs measured one at a time for the speed-up (default 3)")
    p.add_argument("--json", action="store_true", help="`throughput`: print only the headline JSON record")
    _pack_args(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from runner.bench import run_bench
    return run_bench(args)


def _read_json_map(path: str, what: str) -> dict[str, float]:
    p = Path(path)
    if not p.is_file():
        raise InputError(path, "file not found", f"give a JSON file of {what}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON at line {exc.lineno}: {exc.msg}", "fix the JSON") from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()):
        raise InputError(path, f"expected an object {{ticker: number}} of {what}", 'write e.g. {"AAPL": 0.5, "MSFT": 0.5}')
    return {str(k): float(v) for k, v in data.items()}


def cmd_backtest(args) -> int:
    from eval.backtest import backtest, backtest_positions, holding_window
    from eval.baselines import BASELINES, baseline_metrics, baseline_weights
    from eval.market.calendar import Quarter
    tickers = [t.strip() for t in args.tickers.split(",") if t.strip()]
    if len(set(tickers)) != len(tickers) or not tickers:
        raise InputError("--tickers", f"needs distinct tickers, got {args.tickers!r}", "list each ticker once")
    if (args.weights is None) == (args.positions is None):
        raise InputError("--weights/--positions", "give exactly one of them", "e.g. --weights equal")
    quarter = Quarter.parse(args.quarter, "--quarter")
    pack = _load_pack(args)
    window = holding_window(pack, quarter, tickers, args.rf, where_tickers="--tickers", where_quarter="--quarter")
    if args.positions:
        result = backtest_positions(window, _read_json_map(args.positions, "share counts"), args.cash, where=args.positions)
    else:
        if args.weights in BASELINES:
            w = dict(zip(tickers, baseline_weights(pack, quarter, tickers, args.weights).tolist()))
            where = f"--weights {args.weights}"
        else:
            w, where = _read_json_map(args.weights, "weights"), args.weights
        result = backtest(window, w, allow_cash=args.allow_cash, capital=args.capital, whole_shares=args.whole_shares, where=where)
    baselines = baseline_metrics(pack, quarter, tickers, args.rf, args.capital, window) if args.baselines else {}
    if args.json:
        out = result.metrics.model_dump()
        if baselines:
            out = {"metrics": out, "baselines": {k: v.model_dump() for k, v in baselines.items()}}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{quarter}: bought at the {result.as_of} close, held to {result.end} ({result.metrics.trading_days} trading days); rf {result.rf_source}")
    print("weights: " + ", ".join(f"{t} {x:.4f}" for t, x in result.weights.items()))
    rows = {"portfolio": result.metrics} | baselines
    print(_metrics_table(rows))
    return 0


def _metrics_table(rows: dict) -> str:
    cols = ["total_return_pct", "spy_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct", "n_positions", "cash_pct"]
    fmt = lambda v: "null" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))
    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in rows.items():
        d = m.model_dump()
        lines.append(f"| {name} | " + " | ".join(fmt(d[c]) for c in cols) + " |")
    reasons = {f"{n}.{k}": v for n, m in rows.items() for k, v in m.null_reasons.items()}
    lines += [f"null {k}: {v}" for k, v in reasons.items()]
    return "\n".join(lines)


def cmd_demo(args) -> int:
    from runner.demo import run_demo
    return run_demo(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"madbench: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # `madbench memo ... | head`
        return 0
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        print(f"madbench: error: {exc.strerror or exc}: {exc.filename or ''}\n"
              "  Committed results are intact (every file is written whole or not at all). "
              "Free some space, then run the same command again to resume.", file=sys.stderr)
        return EXIT_DISK_FULL


if __name__ == "__main__":
    sys.exit(main())
