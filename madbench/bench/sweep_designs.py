"""`madbench bench sweep`: multi-arm sweep designs measured by simulation, no LLM call.

Each cell draws ``--sweeps`` sweeps of ``--arms`` arms against one control on ``--max-scenarios`` scenarios
(``eval.stats.sweep_simulation.draw``: paired normal differences sharing the control's noise, correlation
``--correlation`` between arms), runs each design's looks exactly as the runner does, and reports the family-wise
error (the chance of declaring any arm with no effect better), each better arm's power, the chance that the arm
selected (the declared arm with the largest estimate) is the best, the runs used against the fixed grid's, and the
simultaneous intervals' joint coverage, beside the naive figures (unadjusted tests at the stop). It measures; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from madbench.data.errors import InputError
from madbench.data.scenario import load_scenarios
from madbench.eval.stats.frame import json_safe
from madbench.eval.stats.group_sequential import SPENDING, planned_looks
from madbench.eval.stats.sweep_design import RULES, SweepDesign, make_sweep
from madbench.eval.stats.sweep_simulation import Rules, planned_df, simulate
from madbench.runner.sequential import MAX_LOOKS, schedule_order

#: The cells: name → (how many arms at which d_z; the rest at 0).
CELLS = {"global null": {}, "partial null": {0.39: 2}, "one better": {0.5: 1}, "two better": {0.5: 2},
         "graded": {0.25: 1, 0.5: 1}}


def effects_of(cell: dict[float, int], arms: int) -> np.ndarray:
    """The cell's effects, the better arms first."""
    out = [e for e, k in sorted(cell.items(), reverse=True) for _ in range(k)]
    if len(out) > arms:
        raise InputError("--arms", f"{arms} arms are fewer than a cell's {len(out)} better arms", "give --arms 2 or more")
    return np.array(out + [0.0] * (arms - len(out)))


#: One command line, shown under `madbench bench sweep --help`.
EXAMPLE = "madbench bench sweep --json   # 8 arms, 70 scenarios, 5 looks; add --margin 0.5 for drop-the-losers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench sweep`'s options."""
    parser.add_argument("--sweeps", type=int, default=4000, help="simulated sweeps per design and cell (default 4000)")
    parser.add_argument("--arms", type=int, default=8, help="arms against the control (default 8)")
    parser.add_argument("--max-scenarios", type=int, default=70, help="the designs' maximum of scenarios (default 70)")
    parser.add_argument("--looks", type=int, default=5, help="looks (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="the simulation's seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    parser.add_argument("--rule", choices=RULES, help="measure this rule only (default: mams and bonferroni)")
    parser.add_argument("--spending", choices=tuple(SPENDING), default="pocock", help="spending shape (default pocock)")
    parser.add_argument("--effect", type=float, default=0.5,
                        help="the d_z the futility bounds are planned for (default 0.5)")
    parser.add_argument("--power", type=float, default=0.85, help="one arm's planned power there (default 0.85)")
    parser.add_argument("--correlation", type=float, default=0.5,
                        help="the simulated correlation of two arms' differences (default 0.5: equal noise)")
    parser.add_argument("--design-correlation", type=float, default=0.5,
                        help="the correlation the mams boundary is computed for (default 0.5)")
    parser.add_argument("--margin", type=float, help="drop arms more than this d_z behind the leader (default: none)")
    parser.add_argument("--quarters", metavar="SCENARIOS",
                        help="lay the scenarios out in quarters as this scenario file's are, in the schedule order of "
                             "seed 0, and test each look with the quarter-clustered t (default: independent)")
    parser.add_argument("--icc", type=float, default=0.0, help="with --quarters: the intra-quarter correlation (default 0)")


def check(args: argparse.Namespace) -> None:
    """The options in range: one InputError naming the first that is not."""
    for flag, value, lo, hi in (("--sweeps", args.sweeps, 100, 10_000_000), ("--arms", args.arms, 1, 50),
                                ("--looks", args.looks, 1, MAX_LOOKS), ("--max-scenarios", args.max_scenarios, 2, 100_000),
                                ("--effect", args.effect, 0.01, 5.0), ("--icc", args.icc, 0.0, 0.999),
                                ("--correlation", args.correlation, 0.0, 0.999),
                                ("--design-correlation", args.design_correlation, 0.0, 0.999),
                                ("--power", args.power, 0.01, 0.999)):
        if not lo <= value <= hi:
            raise InputError(flag, f"{value} is out of range", f"give a value from {lo} to {hi}")
    if args.margin is not None and not args.margin > 0:
        raise InputError("--margin", f"{args.margin} drops every arm behind a leader", "give a positive d_z, e.g. 0.5")
    try:
        planned_looks(args.max_scenarios, args.looks)
    except ValueError as exc:
        raise InputError("--looks", str(exc), "give fewer looks or more scenarios") from None


def clusters_of(args: argparse.Namespace) -> list[str] | None:
    """Each scenario's quarter in the schedule order of seed 0 (``--quarters``), or None: independent scenarios."""
    if not args.quarters:
        if args.icc:
            raise InputError("--icc", "independent scenarios have no quarters to correlate within",
                             "give --quarters SCENARIOS with it")
        return None
    quarters = {s.id: s.invest_quarter for s in load_scenarios(args.quarters)}
    args.max_scenarios = len(quarters)
    return [quarters[s] for s in schedule_order(quarters, 0)]


def designs(args: argparse.Namespace, clusters: list[str] | None = None) -> list[tuple[str, SweepDesign]]:
    n = planned_looks(args.max_scenarios, args.looks)
    df = planned_df(n, clusters)
    out = []
    for rule in [args.rule] if args.rule else list(RULES):
        d = make_sweep(n, args.arms, 0.05, rule, args.spending, args.design_correlation, True, args.effect,
                       args.power, df=df)
        out.append((f"{rule} {args.spending} + futility", d))
    fixed = make_sweep([args.max_scenarios], args.arms, 0.05, args.rule or "mams", args.spending,
                       args.design_correlation, False, args.effect, args.power,
                       df=planned_df([args.max_scenarios], clusters))
    out.append((f"fixed grid ({args.rule or 'mams'}, one look)", fixed))
    return out


def bench_sweep(args: argparse.Namespace) -> list[dict]:
    """Every design in every cell: a row each."""
    clusters = clusters_of(args)
    rng = np.random.default_rng(args.seed)
    rows = []
    for label, d in designs(args, clusters):
        for cell, spec in CELLS.items():
            effects = effects_of(spec, args.arms)
            t0 = time.perf_counter()
            out = simulate(d, effects, args.sweeps, rng, args.correlation, Rules(args.margin), clusters, args.icc)
            rows.append({"design": label, "cell": cell, "effects": effects.tolist(), "looks": list(d.n),
                         "efficacy_z": [round(x, 4) for x in d.efficacy],
                         "futility_z": None if d.futility is None else [round(x, 4) for x in d.futility],
                         "planned_power": d.power, "sweeps": args.sweeps, "correlation": args.correlation,
                         "margin": args.margin, "quarters": None if clusters is None else len(set(clusters)),
                         "icc": args.icc, **out, "seconds": round(time.perf_counter() - t0, 2)})
    return rows


def _f(x) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3f}"


def format_rows(rows: list[dict]) -> str:
    head = (f"{'design':<34} {'cell':<13} {'FWER':>6} {'naive':>6} {'power':>6} {'any':>6} {'best':>6} {'runs':>6} "
            f"{'/fixed':>7} {'CI cov':>6} {'naive':>6}")
    r0 = rows[0]
    lines = [f"{r0['sweeps']:,} simulated sweeps per cell; {len(r0['effects'])} arms and a control, looks at "
             f"{r0['looks']} scenarios; arms' differences correlated {r0['correlation']:g}; FWER: any arm with no effect "
             "declared better; power: each better arm declared; best: the best arm selected", head]
    for r in rows:
        lines.append(f"{r['design']:<34} {r['cell']:<13} {_f(r['fwer']):>6} {_f(r['naive_fwer']):>6} "
                     f"{_f(r['power_per_better_arm']):>6} {_f(r['any_better_declared']):>6} {_f(r.get('select_best')):>6} "
                     f"{r['runs']:>6.0f} {r['share_of_fixed']:>7.1%} {_f(r['ci_covers_all']):>6} "
                     f"{_f(r['naive_ci_covers_all']):>6}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.quarters:
        clusters_of(args)  # the maximum is the file's scenarios
    check(args)
    rows = bench_sweep(args)
    print(json.dumps(json_safe(rows), indent=1, allow_nan=False) if args.json else format_rows(rows))
    return 0
