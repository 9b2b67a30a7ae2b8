"""`madbench bench sequential`: the sequential designs measured by simulation, no LLM call.

Each cell draws ``experiments`` paired experiments of ``max_scenarios`` scenario differences d_i ~ N(δ, 1) (δ = 0:
the null; δ = the effect: the alternative), runs every design's looks on them exactly as the runner does
(``eval.stats.group_sequential.take_look``'s t against the bounds on the t scale), and reports the rejection rate, the
scenarios used, the stagewise-adjusted p and the repeated confidence interval's coverage, beside the fixed design
(one look at the maximum) and the naive figures (an unadjusted t-test at the stop). It measures; it asserts nothing.
All arithmetic is on arrays: one cell of 4,000 experiments takes well under a second.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np
import psutil

from madbench.data.errors import InputError
from madbench.data.scenario import load_scenarios
from madbench.eval.stats.clustered import cr2_se_df
from madbench.eval.stats.group_sequential import (
    Design,
    look_deff,
    look_df,
    make_design,
    planned_looks,
    repeated_ci,
    stagewise_p,
    t_to_z,
    z_to_t,
)
from madbench.runner.batch import load_batch, resolve_scenarios
from madbench.runner.cli.common import number
from madbench.runner.sequential import design_of, schedule_order


@dataclass(frozen=True)
class Variant:
    """A design the bench measures: a spending family with or without futility; ``t_scale`` False applies the normal
    bounds to the t unchanged (not offered: shown for what the t conversion buys)."""
    label: str
    spending: str | None  # None: the fixed design, one look at the maximum
    futility: bool = False
    t_scale: bool = True


VARIANTS = (
    Variant("fixed (one look)", None),
    Variant("obrien-fleming", "obrien-fleming"),
    Variant("obrien-fleming + futility", "obrien-fleming", True),
    Variant("pocock", "pocock"),
    Variant("pocock + futility", "pocock", True),
    Variant("obrien-fleming, z bounds on the t (not offered)", "obrien-fleming", False, False),
)


def design_for(v: Variant, max_scenarios: int, looks: int, alpha: float, effect: float, power: float,
               clusters=None, icc: float = 0.0) -> Design:
    """``v``'s design; with ``clusters`` (each scenario's quarter in schedule order) planned on the t scale of the
    quarter-clustered looks, as the runner plans a batch's (``runner.sequential.design_of``), and for the
    information the intra-quarter correlation ``icc`` leaves (``look_deff``)."""
    n = [max_scenarios] if v.spending is None else planned_looks(max_scenarios, looks)
    if clusters is None:
        return make_design(n, alpha, v.spending or "obrien-fleming", v.futility, effect, power)
    df = [look_df(list(clusters)[:k]) for k in n]
    deff = [look_deff(list(clusters)[:k], icc) for k in n]
    return make_design(n, alpha, v.spending or "obrien-fleming", v.futility, effect, power, df=df, deff=deff)


def look_statistics(x: np.ndarray, n: np.ndarray, clusters=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d̄, SE, df) of each experiment (row of ``x``) at each look of ``n`` pairs, as ``take_look`` computes them: the
    ordinary paired t's s/√n and n − 1, or with ``clusters`` (each scenario's quarter, in draw order) the CR2 SE and
    Satterthwaite df of the look's quarters (``group_sequential.look_df``)."""
    if clusters is None:
        idx = n.astype(int) - 1
        s1, s2 = np.cumsum(x, 1)[:, idx], np.cumsum(x * x, 1)[:, idx]
        mean = s1 / n
        sd = np.sqrt(np.maximum(s2 - n * mean ** 2, 0.0) / (n - 1))
        return mean, sd / np.sqrt(n), n - 1
    mean, se, df = (np.zeros((len(x), len(n))) for _ in range(3))
    for k, size in enumerate(n.astype(int)):
        labels = np.asarray(clusters)[:size]
        df[:, k] = look_df(labels)
        if len(set(labels.tolist())) < 2:
            mean[:, k] = x[:, :size].mean(1)
            se[:, k] = x[:, :size].std(1, ddof=1) / np.sqrt(size)
        else:
            mean[:, k], se[:, k] = cr2_se_df(x[:, :size], labels)[:2]
    return mean, se, df[0]


def draw(experiments: int, n_max: int, delta: float, rng: np.random.Generator, clusters=None, icc: float = 0.0):
    """Scenario differences with mean ``delta`` and variance 1: independent N(δ, 1), or with ``clusters`` sharing a
    quarter effect, x = δ + √ρ·u_g + √(1 − ρ)·e (intra-quarter correlation ρ = ``icc``)."""
    if clusters is None:
        return rng.standard_normal((experiments, n_max)) + delta
    _, codes = np.unique(np.asarray(clusters)[:n_max], return_inverse=True)
    shared = rng.standard_normal((experiments, int(codes.max()) + 1))[:, codes]
    return delta + math.sqrt(icc) * shared + math.sqrt(1.0 - icc) * rng.standard_normal((experiments, n_max))


def simulate(d: Design, delta: float, experiments: int, rng: np.random.Generator, t_scale: bool = True,
             clusters=None, icc: float = 0.0) -> dict:
    """One cell: the design run on ``experiments`` simulated experiments with true standardised effect ``delta``
    (``clusters``: each scenario's quarter in schedule order, ``icc`` the intra-quarter correlation; ``draw``)."""
    n_max = d.n[-1]
    x = draw(experiments, n_max, delta, rng, clusters, icc)
    n = np.asarray(d.n, float)
    mean, se, df = look_statistics(x, n, clusters)
    t = mean / se
    c_t = z_to_t(np.asarray(d.efficacy), df) if t_scale else np.asarray(d.efficacy)
    cross = np.abs(t) >= c_t
    stop = cross.copy()
    if d.futility is not None:
        f_t = z_to_t(np.asarray(d.futility), df) if t_scale else np.asarray(d.futility)
        stop[:, :-1] |= (d.sign * t < f_t)[:, :-1]
    stop[:, -1] = True
    k = stop.argmax(1)  # 0-based look at which each experiment stopped
    rows = np.arange(experiments)
    t_k, n_k, reject = t[rows, k], n[k], cross[rows, k]
    p_adj = np.ones(experiments)
    for look in np.unique(k):
        sel = k == look
        p_adj[sel] = stagewise_p(d, int(look) + 1, t_to_z(t_k[sel], df[look]))
    low, high = repeated_ci(mean[rows, k], se[rows, k], c_t[k])
    from scipy.stats import t as student
    naive_p = 2 * student.sf(np.abs(t_k), df[k])
    half = student.ppf(1 - d.alpha / 2, df[k]) * se[rows, k]
    return {"reject": float(reject.mean()), "reject_towards": float((reject & (d.sign * t_k > 0)).mean()),
            "scenarios": float(n_k.mean()), "share_of_fixed": float(n_k.mean() / n_max),
            "adjusted_p_below_alpha": float((p_adj < d.alpha).mean()),
            "rci_covers": float(((low <= delta) & (delta <= high)).mean()),
            "naive_p_below_alpha": float((naive_p < d.alpha).mean()),
            "naive_ci_covers": float(((mean[rows, k] - half <= delta) & (delta <= mean[rows, k] + half)).mean()),
            "stopped_early": float((k < len(d.n) - 1).mean())}


def bench_sequential(experiments: int = 4000, max_scenarios: int = 70, looks: int = 5, effect: float = 0.39,
                     alpha: float = 0.05, power: float = 0.8, seed: int = 0, clusters=None, icc: float = 0.0) -> list[dict]:
    """Every variant under the null and under the alternative: a row per (variant, cell). ``clusters``: each
    scenario's quarter in schedule order (then ``max_scenarios`` is their count), drawn with intra-quarter correlation
    ``icc`` and tested with the quarter-clustered t; None: independent scenarios, the designs planned on the normal
    scale (the bench's figures as they were)."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in VARIANTS:
        d = design_for(v, max_scenarios, looks, alpha, effect, power, clusters, icc)
        for cell, delta in (("null", 0.0), ("alternative", effect)):
            rows.append({"design": v.label, "cell": cell, "delta": delta, "looks": list(d.n), "planned_power": d.power,
                         **simulate(d, delta, experiments, rng, v.t_scale, clusters, icc)})
    return rows


def schedule_clusters(quarters: dict[str, str], seed: int) -> list[str]:
    """Each scenario's quarter in the runner's schedule order for ``seed`` (``runner.sequential.schedule_order``)."""
    return [quarters[s] for s in schedule_order(quarters, seed)]


def bench_batch(spec, quarters: dict[str, str], experiments: int, seed: int = 0, icc: float = 0.0) -> list[dict]:
    """A batch's own ``sequential:`` design (``runner.sequential.design_of`` on its scenarios' ``quarters``), under the
    null and at its planned effect, its scenarios in the schedule's order and clustered by quarter as its looks are."""
    d = design_of(spec, quarters)
    clusters = schedule_clusters(quarters, spec.sequential.seed)
    rng = np.random.default_rng(seed)
    label = f"{spec.name}: {d.spending}" + (" + futility" if d.futility is not None else "")
    return [{"design": label, "cell": cell, "delta": delta, "looks": list(d.n), "planned_power": d.power,
             "detectable_effect": d.detectable, "df": list(d.df or ()), "notes": list(d.notes),
             **simulate(d, delta, experiments, rng, True, clusters, icc)}
            for cell, delta in (("null", 0.0), ("alternative", d.effect))]


def format_rows(rows: list[dict], experiments: int, clustering: str = "") -> str:
    head = (f"{'design':<48} {'cell':<11} {'reject':>7} {'plan':>6} {'E[n]':>6} {'/fixed':>6} {'p_adj<a':>7} "
            f"{'RCI cov':>7} {'naive p<a':>9} {'naive cov':>9}")
    drawn = f"paired differences N(delta, 1){clustering}"
    lines = [f"{experiments:,} simulated experiments per cell; {drawn}; "
             "reject: two-sided at the design's bounds (under the alternative: towards the effect)", head]
    for r in rows:
        rate = r["reject"] if r["cell"] == "null" else r["reject_towards"]
        plan = "" if r["cell"] == "null" else f"{r['planned_power']:.3f}"
        lines.append(f"{r['design']:<48} {r['cell']:<11} {rate:>7.4f} {plan:>6} {r['scenarios']:>6.1f} "
                     f"{r['share_of_fixed']:>6.1%} {r['adjusted_p_below_alpha']:>7.4f} {r['rci_covers']:>7.4f} "
                     f"{r['naive_p_below_alpha']:>9.4f} {r['naive_ci_covers']:>9.4f}")
    return "\n".join(lines)


EXAMPLE = "madbench bench sequential --batch configs/batches/a7-sequential.yaml --icc 0.15"

#: Bytes of one float64 per simulated scenario difference, times the arrays a cell holds at once (the draws, their
#: squares and the two running sums: ``simulate``).
CELL_BYTES_PER_DRAW = 8 * 4


def available_memory() -> int:
    """Bytes this machine can give a new allocation without swapping."""
    return int(psutil.virtual_memory().available)


def check_sequential_options(experiments: int, max_scenarios: int, looks: int) -> None:
    """The looks fit in the scenarios and a cell's arrays fit in memory, before anything is drawn: one line instead
    of numpy's traceback minutes (or terabytes) later."""
    try:
        planned_looks(max_scenarios, looks)
    except ValueError as exc:
        raise InputError("--looks", str(exc), "give fewer --looks or more --max-scenarios") from None
    need, have = CELL_BYTES_PER_DRAW * experiments * max_scenarios, available_memory()
    if need > have:
        raise InputError("--experiments", f"{experiments:,} experiments of {max_scenarios:,} scenarios need about "
                         f"{need / 2**30:,.1f} GiB at once, and {have / 2**30:,.1f} GiB is available",
                         "give fewer --experiments or --max-scenarios")


def quarters_of_scenarios(scenarios) -> dict[str, str]:
    return {s.id: s.invest_quarter for s in scenarios}


def sequential_quarters(args: argparse.Namespace) -> dict[str, str] | None:
    """The scenarios and their quarters: the batch's (--batch), the file's (--quarters), or None for independent
    scenarios (then --icc means nothing and is refused)."""
    if args.batch is not None and args.quarters is not None:
        raise InputError("--quarters", "a batch's design is measured on its own scenarios", "drop --quarters or --batch")
    if args.batch is not None:
        spec, base = load_batch(args.batch)
        if spec.sequential is None:
            raise InputError(args.batch, "no `sequential:` design to measure", "give a batch with one, such as "
                             "configs/batches/a7-sequential.yaml")
        if spec.scenarios.draws:
            raise InputError(args.batch, "scenarios.draws: `bench sequential` reads a batch's scenario file, not drawn "
                             "scenarios", "give a batch whose scenarios are listed in a file")
        return quarters_of_scenarios(resolve_scenarios(spec, base, None, str(args.batch)))
    if args.quarters is not None:
        return quarters_of_scenarios(load_scenarios(args.quarters))
    if args.icc:
        raise InputError("--icc", "independent scenarios have no quarters to correlate within",
                         "give --quarters SCENARIOS or --batch FILE with it")
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiments", type=number(int, ge=100, le=100_000_000), default=4000,
                        help="simulated experiments per design and cell (default 4000)")
    parser.add_argument("--max-scenarios", type=number(int, ge=4, le=1_000_000), default=70,
                        help="the designs' maximum of scenarios (default 70)")
    parser.add_argument("--looks", type=number(int, ge=1, le=20), default=5, help="looks (default 5)")
    parser.add_argument("--effect", type=number(gt=0, le=5), default=0.39,
                        help="the standardised effect d_z of the alternative and of the plan (default 0.39)")
    parser.add_argument("--seed", type=number(int, ge=0), default=0, help="the simulation's seed (default 0)")
    parser.add_argument("--quarters", metavar="SCENARIOS",
                        help="lay the scenarios out in quarters as this scenario file's are (e.g. "
                             "configs/scenarios/market-35.yaml), in the schedule order of seed 0, and test each look with "
                             "the quarter-clustered t; the maximum is the file's scenarios (default: independent scenarios)")
    parser.add_argument("--batch", metavar="FILE",
                        help="measure this batch's own `sequential:` design on its scenarios' quarters (e.g. "
                             "configs/batches/a7-sequential.yaml) instead of the standard designs")
    parser.add_argument("--icc", type=number(ge=0, lt=1), default=0.0,
                        help="with --quarters or --batch: the intra-quarter correlation of the simulated differences "
                             "(default 0)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")


def main(args: argparse.Namespace) -> int:
    quarters = sequential_quarters(args)
    n_max = len(quarters) if quarters else args.max_scenarios
    check_sequential_options(args.experiments, n_max, args.looks if args.batch is None else 1)
    if args.batch is not None and quarters is not None:  # sequential_quarters gives a batch's quarters always
        rows = bench_batch(load_batch(args.batch)[0], quarters, args.experiments, args.seed, args.icc)
    else:
        clusters = None if quarters is None else schedule_clusters(quarters, 0)
        rows = bench_sequential(args.experiments, n_max, args.looks, args.effect, seed=args.seed,
                                clusters=clusters, icc=args.icc)
    clustering = "" if quarters is None else (f", {len(set(quarters.values()))} quarters of the scenarios, "
                                              f"intra-quarter correlation {args.icc:g}, quarter-clustered t")
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows, args.experiments, clustering))
    return 0
