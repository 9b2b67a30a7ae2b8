"""`madbench backtest`: hold an allocation through a quarter and print its metrics; `madbench backtest-quarters`:
consecutive quarters, rebalanced (eval/multiquarter.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.calendar import Quarter
from madbench.eval.backtest import backtest, backtest_positions, holding_window
from madbench.eval.baselines import BASELINES, baseline_metrics, baseline_weights
from madbench.eval.multiquarter import QuarterAllocation, backtest_sequence
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import add_pack_args, csv_list, load_pack, number


def register(sub) -> None:
    p = command_parser(sub, "backtest")
    p.add_argument("--quarter", required=True, help="invest quarter, e.g. 2023Q2")
    p.add_argument("--tickers", required=True, help="comma-separated universe")
    p.add_argument("--weights", default=None, help="equal | ivol | minvar | FILE.json ({ticker: weight})")
    p.add_argument("--positions", help="FILE.json of share counts {ticker: shares}, instead of --weights")
    p.add_argument("--cash", type=number(ge=0), default=0.0, help="cash in USD beside --positions")
    p.add_argument("--rf", default="dff", choices=["dff", "dtb3", "0"], help="risk-free rate for cash and Sharpe (default dff)")
    p.add_argument("--capital", type=number(gt=0), default=100_000.0, help="starting cash in USD (default 100000)")
    p.add_argument("--allow-cash", action="store_true", help="weights may sum to less than 1; the rest stays in cash")
    p.add_argument("--whole-shares", action="store_true", help="buy whole shares only; the remainder stays in cash")
    p.add_argument("--baselines", action="store_true", help="also print the equal, ivol, minvar and SPY baselines")
    p.add_argument("--json", action="store_true", help="print the metrics object as JSON")
    add_pack_args(p)
    p.set_defaults(func=cmd_backtest)
    q = command_parser(sub, "backtest-quarters")
    q.add_argument("--steps", required=True, help='FILE.json: consecutive quarters, e.g. [{"quarter": "2023Q1", "weights": '
                   '{"AAPL": 0.5, "MSFT": 0.5}}, {"quarter": "2023Q2", "weights": {...}, "allow_cash": true}]')
    q.add_argument("--cost-bps", type=number(ge=0, le=10_000), default=0.0, help="cost per rebalance in basis points of turnover (default 0)")
    q.add_argument("--rf", default="dff", choices=["dff", "dtb3", "0"], help="risk-free rate for cash and Sharpe (default dff)")
    q.add_argument("--capital", type=number(gt=0), default=100_000.0, help="starting cash in USD (default 100000)")
    q.add_argument("--json", action="store_true", help="print the result (metrics, turnover, equity curve) as JSON")
    add_pack_args(q)
    q.set_defaults(func=cmd_backtest_quarters)


def read_json_map(path: str, what: str) -> dict[str, float]:
    """A JSON file {ticker: number}, or an InputError naming the file."""
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
    tickers = csv_list(args.tickers) or []
    if len(set(tickers)) != len(tickers) or not tickers:
        raise InputError("--tickers", f"needs distinct tickers, got {args.tickers!r}", "list each ticker once")
    if (args.weights is None) == (args.positions is None):
        raise InputError("--weights/--positions", "give exactly one of them", "e.g. --weights equal")
    quarter = Quarter.parse(args.quarter, "--quarter")
    pack = load_pack(args)
    window = holding_window(pack, quarter, tickers, args.rf, where_tickers="--tickers", where_quarter="--quarter")
    if args.positions:
        result = backtest_positions(window, read_json_map(args.positions, "share counts"), args.cash, where=args.positions)
    else:
        if args.weights in BASELINES:
            w = dict(zip(tickers, baseline_weights(pack, quarter, tickers, args.weights).tolist(), strict=True))
            where = f"--weights {args.weights}"
        else:
            w, where = read_json_map(args.weights, "weights"), args.weights
        result = backtest(window, w, allow_cash=args.allow_cash, capital=args.capital, whole_shares=args.whole_shares, where=where)
    baselines = baseline_metrics(pack, quarter, tickers, args.rf, args.capital, window) if args.baselines else {}
    if args.json:
        out = result.metrics.model_dump()
        if baselines:
            out = {"metrics": out, "baselines": {k: v.model_dump() for k, v in baselines.items()}}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{quarter}: bought at the {result.as_of} close, held to {result.end} ({result.metrics.trading_days} trading days); "
          f"rf {result.rf_source}")
    print("weights: " + ", ".join(f"{t} {x:.4f}" for t, x in result.weights.items()))
    rows = {"portfolio": result.metrics} | baselines
    print(metrics_table(rows))
    return 0


def read_steps(path: str) -> list[QuarterAllocation]:
    """The quarters of a multi-quarter backtest from a JSON file, or an InputError naming the file and field."""
    p = Path(path)
    if not p.is_file():
        raise InputError(path, "file not found", "give a JSON list of {quarter, weights, allow_cash}")
    try:
        return TypeAdapter(list[QuarterAllocation]).validate_json(p.read_text())
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), 'write e.g. [{"quarter": "2023Q1", "weights": '
                         '{"AAPL": 0.5, "MSFT": 0.5}}, {"quarter": "2023Q2", "weights": {"AAPL": 1.0}}]') from None


def cmd_backtest_quarters(args) -> int:
    steps = read_steps(args.steps)
    result = backtest_sequence(load_pack(args), steps, args.rf, args.cost_bps, args.capital, where=args.steps)
    if args.json:
        print(result.model_dump_json(indent=1))
        return 0
    print(f"{result.quarters[0]}..{result.quarters[-1]}: rebalanced at each as-of close ({result.metrics.trading_days} "
          f"trading days); turnover {result.turnover:.4f} "
          f"({', '.join(f'{t:.4f}' for t in result.turnover_per_quarter)}), costs ${result.costs_usd:,.2f}")
    print(metrics_table({"portfolio": result.metrics}))
    return 0


def metrics_table(rows: dict) -> str:
    """A Markdown table of backtest metrics, one row per portfolio, then the reasons for any null."""
    cols = ["total_return_pct", "spy_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct",
            "n_positions", "cash_pct"]

    def fmt(v) -> str:
        return "null" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in rows.items():
        d = m.model_dump()
        lines.append(f"| {name} | " + " | ".join(fmt(d[c]) for c in cols) + " |")
    reasons = {f"{n}.{k}": v for n, m in rows.items() for k, v in m.null_reasons.items()}
    lines += [f"null {k}: {v}" for k, v in reasons.items()]
    return "\n".join(lines)
