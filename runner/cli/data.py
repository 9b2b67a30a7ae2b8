"""`madbench data check|fetch`, `madbench scenarios make` and `madbench memo`: market data packs, scenarios, memos."""

from __future__ import annotations

import json
import sys

from madbench.data.blind import blind_memo, pack_companies
from madbench.data.errors import InputError
from madbench.data.home import RAW, home_path
from madbench.data.market.calendar import quarter_range
from madbench.data.market.check import check_pack, format_report
from madbench.data.market.fetch import fetch_pack
from madbench.data.market.pack import resolve_pack_dir
from madbench.data.memo import build_memo
from madbench.data.scenario import dump_scenarios, find_scenario, load_scenarios
from madbench.data.scenario_gen import draw_scenarios, draw_stats
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import (
    add_blind_options,
    add_pack_args,
    blind_options,
    check_out,
    csv_list,
    given_blind_options,
    load_pack,
    number,
)


def register(sub) -> None:
    data = command_parser(sub, "data")
    dsub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION", help="what to do with a pack")
    p = dsub.add_parser("check", help="validate a pack (schema, duplicates, gaps, coverage) and print a coverage summary")
    p.add_argument("--pack", help="pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
    p.set_defaults(func=cmd_data_check)
    p = dsub.add_parser("fetch", help="build a pack online from yfinance and FRED (needs internet)")
    p.add_argument("--tickers", required=True, help="comma-separated symbols; SPY is always added")
    p.add_argument("--start", required=True, help="first date, YYYY-MM-DD")
    p.add_argument("--end", required=True, help="last date, YYYY-MM-DD")
    p.add_argument("--out", required=True, help="new pack directory")
    p.add_argument("--cache-dir", help="raw download cache (default $MADBENCH_HOME/raw: ~/.cache/madbench/raw)")
    p.set_defaults(func=cmd_data_fetch)

    sc = command_parser(sub, "scenarios")
    ssub = sc.add_subparsers(dest="scenarios_command", required=True, metavar="ACTION", help="what to do with scenarios")
    p = ssub.add_parser("make", help="draw seeded random scenarios spread over quarters and sectors")
    p.add_argument("--quarters", required=True, help="inclusive range, e.g. 2021Q4:2025Q3")
    p.add_argument("--count", type=number(int, ge=1, le=1_000_000), default=35, help="number of scenarios (default 35)")
    p.add_argument("--min-tickers", type=number(int, ge=1, le=10_000), default=3, help="fewest tickers in a scenario (default 3)")
    p.add_argument("--max-tickers", type=number(int, ge=1, le=10_000), default=35, help="most tickers in a scenario (default 35)")
    p.add_argument("--seed", type=number(int, ge=0), default=0, help="random seed; the same seed and pack draw the same scenarios (default 0)")
    p.add_argument("--out", help="YAML file to write (else only the statistics are printed)")
    add_pack_args(p)
    p.set_defaults(func=cmd_scenarios_make)

    p = command_parser(sub, "memo")
    p.add_argument("scenario_id", help="the scenario's id in the --scenarios file")
    p.add_argument("--scenarios", required=True, help="scenario YAML file")
    p.add_argument("--json", action="store_true", help="print the evidence items as JSON instead of the text (with --blind: "
                                                       "the blind items and every masked name with its mask and class)")
    p.add_argument("--blind", action="store_true", help="the blind memo, exactly as a blind run sends it")
    add_blind_options(p, "(with --blind)")
    add_pack_args(p)
    p.set_defaults(func=cmd_memo)


def cmd_data_check(args) -> int:
    report = check_pack(resolve_pack_dir(args.pack))
    print(format_report(report))
    if not report.ok:
        raise InputError(report.root, f"{len(report.problems)} problem(s) found; first: {report.problems[0]}",
                         "fix the listed problems in the pack")
    return 0


def cmd_data_fetch(args) -> int:
    check_out(args.out, "--out")
    out = fetch_pack(csv_list(args.tickers) or [], args.start, args.end, args.out,
                     args.cache_dir or home_path(RAW))
    print(f"wrote pack {out}")
    return 0


def cmd_scenarios_make(args) -> int:
    if args.out is not None:
        check_out(args.out, "--out", kind="file")
    pack = load_pack(args)
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
    if not args.blind and given_blind_options(args):
        raise InputError(given_blind_options(args)[0], "sets how a blind memo is built, and without --blind the memo is "
                         "not blind", "add --blind, or leave the option out")
    scenarios = load_scenarios(args.scenarios)
    i, scenario = find_scenario(scenarios, args.scenario_id, args.scenarios)
    pack = load_pack(args)
    memo = build_memo(scenario, pack, where=f"{args.scenarios}: scenarios[{i}]")
    if not args.blind:
        sys.stdout.write(memo.to_json() + "\n" if args.json else memo.text)
        return 0
    options = blind_options(args)
    blinded = blind_memo(memo, scenario, pack_companies(pack.universe), options)  # the call a blind run makes
    if args.json:
        out = {"memo": blinded.memo.scenario_id, "options": options.model_dump(mode="json"),
               "items": [it.model_dump() for it in blinded.memo.items],
               "masked": [{"text": t.text, "mask": t.mask, "class": t.mask_class} for t in blinded.masked]}
        sys.stdout.write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(blinded.memo.text)
    return 0
