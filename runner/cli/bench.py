"""`madbench bench`: the benchmarks (memo, backtest, gateway, runner, throughput, cached replay)."""

from __future__ import annotations

from runner.bench.stages import run_bench
from runner.cli.commands import command_parser
from runner.cli.common import ROOT, add_pack_args

WHAT = ["memo", "backtest", "gateway", "runner", "throughput", "cache"]


def register(sub) -> None:
    p = command_parser(sub, "bench")
    p.add_argument("what", choices=WHAT, help="which benchmark: " + ", ".join(WHAT))
    p.add_argument("--scenarios", default=str(ROOT / "configs" / "scenarios" / "market-35.yaml"),
                   help="scenario file for `bench memo`, `throughput` and `cache` (default configs/scenarios/market-35.yaml)")
    p.add_argument("--n", type=int, default=10_000, help="backtests for `bench backtest` (default 10000); calls for `bench gateway` (at most 2000)")
    p.add_argument("--runs", type=int, default=100, help="runs for `throughput` and `cache` (3-agent, 1-round debates with CRIT; default 100)")
    p.add_argument("--rpm", type=float, default=600, help="`throughput`: requests/min the simulated provider allows (default 600)")
    p.add_argument("--tpm", type=float, help="`throughput`: tokens/min the simulated provider allows (default: none)")
    p.add_argument("--latency-median", type=float, default=2.0, help="`throughput`: median provider latency in s, lognormal (default 2)")
    p.add_argument("--concurrency", type=int, default=32, help="`throughput`: runs in flight (default 32)")
    p.add_argument("--serial-runs", type=int, default=3, help="`throughput`: runs measured one at a time for the speed-up (default 3)")
    p.add_argument("--json", action="store_true", help="`throughput`: print only the headline JSON record")
    add_pack_args(p)
    p.set_defaults(func=run_bench)
