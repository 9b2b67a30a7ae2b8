"""What `madbench` offers, as data: the command groups, their commands and each command's one-line description.

This module imports nothing but the standard library, so `madbench --help` lists every command without
importing any command group (whose modules import pandas, pydantic models, Ray, ...). ``main`` imports only
the group that owns the command being run (``Group.module``); the others stay one-line entries.

A group module creates each of its commands with ``command_parser(sub, name)``, which takes the one-line
description from here: this is its only source. A new group is one module of this package, with one
``register(sub)`` function, plus one entry in ``GROUPS``, whose order is the order of `madbench --help`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Group:
    """One command group: the module whose ``register(sub)`` adds its commands, and those commands."""
    #: The module to import, e.g. "madbench.runner.cli.run".
    module: str
    #: Command name -> its one-line description, in the order `madbench --help` lists them.
    commands: dict[str, str] = field(compare=False)


#: The command groups, in the order `madbench --help` lists them.
GROUPS: tuple[Group, ...] = (
    Group("madbench.runner.cli.demo", {
        "demo": "the main job on the embedded defaults: the rules-35 and quickstart batches",
    }),
    Group("madbench.runner.cli.run", {
        "run": "run a batch of scenario x config x replicate debates on Ray (resumable)",
    }),
    Group("madbench.runner.cli.status", {
        "status": "progress and outcome of a batch (running or finished)",
    }),
    Group("madbench.runner.cli.data", {
        "data": "market data packs: check one, fetch one online",
        "scenarios": "scenario files: draw seeded random scenarios from a pack",
        "memo": "print the point-in-time memo of one scenario",
    }),
    Group("madbench.runner.cli.debate", {
        "debate": "run one debate on one scenario, with its backtest",
        "trace": "inspect a run's trace",
    }),
    Group("madbench.runner.cli.backtest", {
        "backtest": "hold an allocation through a quarter and print its metrics",
        "backtest-quarters": "hold consecutive quarterly allocations, rebalanced at each as-of close, with turnover costs",
    }),
    Group("madbench.runner.cli.score", {
        "rescore": "re-score the stored traces of finished runs (no debate is re-run)",
    }),
    Group("madbench.runner.cli.stats", {
        "stats": "summaries, paired tests, paper-style tables, correlations and OLS over runs.parquet",
        "power": "scenarios needed for a paired test to detect an effect",
    }),
    Group("madbench.runner.cli.probe", {
        "probe": "leakage probes: how far a model's memory of each quarter's returns beats chance (recall)",
    }),
    Group("madbench.runner.cli.leakage", {
        "leakage": "leakage audits of blind memos: what is left in them, and how often a model still names the companies and quarter",
    }),
    Group("madbench.runner.cli.report", {
        "report": "write a self-contained report.html (tables, plots, trace explorer) for a results dir",
    }),
    Group("madbench.runner.cli.provenance", {
        "replay": "rebuild a batch's tables, re-scores and statistics from its traces and cache (no provider call) and compare",
        "diff": "what differs between two runs or two batches: config, prompts, data, models served, code, outcomes",
        "export": "write a batch's runs as inspect_ai eval logs (`inspect view`) or self-describing JSONL",
    }),
    Group("madbench.runner.cli.llm", {
        "llm": "send requests through the gateway",
        "cache": "inspect, verify (against the runs that used it) or prune the LLM response cache",
        "model": "the embedded offline model (Gemma 3 270M behind llama.cpp)",
    }),
    Group("madbench.sim.cli", {
        "sim": "a simulated OpenAI-compatible provider (rate limits, latency) for trying setups offline",
    }),
    Group("madbench.bench.cli", {
        "bench": "benchmarks, one subcommand each: the stages, the runner under load and at scale, its guarantees, costs, sequential and sweep designs",
    }),
)

#: One example per command path (its --help ends with it); `madbench bench`'s benchmarks carry their own (EXAMPLE).
EXAMPLES: dict[str, str] = {
    "": "madbench demo",
    "demo": "madbench demo --results results",
    "run": "madbench run configs/batches/rules-35.yaml --dry-run",
    "status": "madbench status results/rules-35",
    "data": "madbench data check",
    "data check": "madbench data check --pack ../shared/data/market",
    "data fetch": "madbench data fetch --tickers AAPL,MSFT,XOM --start 2019-01-01 --end 2025-12-31 --out packs/mine",
    "scenarios": "madbench scenarios make --quarters 2021Q4:2025Q3 --count 35 --seed 7 --out my-scenarios.yaml",
    "scenarios make": "madbench scenarios make --quarters 2021Q4:2025Q3 --count 35 --seed 7 --out my-scenarios.yaml",
    "memo": "madbench memo 2025Q2_n3_022 --scenarios configs/scenarios/market-35.yaml",
    "debate": "madbench debate 2025Q2_n3_022 --scenarios configs/scenarios/market-35.yaml "
              "--config configs/debate/causal-debate-3.yaml --model rules/auto",
    "trace": "madbench trace show results/debates/RUN_ID",
    "trace show": "madbench trace show results/debates/RUN_ID --responses",
    "backtest": "madbench backtest --quarter 2023Q2 --tickers AAPL,MSFT,XOM --weights equal --baselines",
    "backtest-quarters": "madbench backtest-quarters --steps steps.json --cost-bps 10",
    "rescore": "madbench rescore results/rules-35 --scorer rules --rubric role-aware",
    "stats": "madbench stats results/rules-35 --compare causal-debate-3,single-causal --metric sharpe",
    "power": "madbench power --metric sharpe --effect 0.14 --sd 0.37",
    "probe": "madbench probe recall --model openai/madbench-sim --api-base http://127.0.0.1:8000/v1 "
             "--scenarios configs/scenarios/market-35.yaml",
    "probe recall": "madbench probe recall --model openai/madbench-sim --api-base http://127.0.0.1:8000/v1 "
                    "--scenarios configs/scenarios/market-35.yaml",
    "leakage": "madbench leakage audit --scenarios configs/scenarios/market-35.yaml",
    "leakage audit": "madbench leakage audit --scenarios configs/scenarios/market-35.yaml --ids 2025Q2_n3_022",
    "report": "madbench report results/rules-35",
    "replay": "madbench replay results/rules-35",
    "diff": "madbench diff results/a results/b",
    "export": "madbench export results/rules-35 --format inspect",
    "llm": "madbench llm ask --model rules/auto --prompt hi",
    "llm ask": "madbench llm ask --model openai/gpt-4o-mini --prompt 'Say hi as JSON' --schema answer.json",
    "cache": "madbench cache stats",
    "cache stats": "madbench cache stats --json",
    "cache prune": "madbench cache prune --older-than 30d",
    "cache verify": "madbench cache verify results/rules-35",
    "model": "madbench model status",
    "model serve": "madbench model serve",
    "model status": "madbench model status",
    "model stop": "madbench model stop",
    "sim": "madbench sim serve --rpm 500 --latency-median 2",
    "sim serve": "madbench sim serve --api anthropic --port 8010",
    "bench": "madbench bench scale --runs 200",
}

#: Every command's one-line description, in help order.
COMMANDS: dict[str, str] = {name: text for g in GROUPS for name, text in g.commands.items()}
_OWNER: dict[str, Group] = {name: g for g in GROUPS for name in g.commands}


def group_of(command: str | None) -> Group | None:
    """The group that owns ``command``; None for no command or an unknown one."""
    return _OWNER.get(command) if command else None


def command_word(argv: list[str]) -> str | None:
    """The command `madbench` is asked to run: the first argument not starting with '-' (the top level
    has no option taking a value); None when there is none (`madbench --help`, `madbench --version`)."""
    return next((a for a in argv if not a.startswith("-")), None)


def command_parser(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """The subparser of command ``name``, with its one-line description from ``COMMANDS`` as both its entry in
    `madbench --help` and the opening of its own --help; ``kwargs`` go to ``add_parser``."""
    text = COMMANDS[name]
    return sub.add_parser(name, help=text, description=text, **kwargs)
