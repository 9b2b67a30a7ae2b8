"""Debate dynamics: who moved toward whom, with or without new evidence, and what the debate changed.

Pure functions on allocations, then the functions that read them from a run's typed trace events. An
allocation here is a position: its ticker weights plus its cash weight under the key ``CASH``, so every
distance counts cash as one more holding (weights and cash sum to 1).

Per agent i and round t of a protocol with critiques (the paper protocol: propose, then critique → revise):
P_i is what i revised (its proposal in round 1, its round t−1 revision after), R_i its round-t revision (the
last revise turn of the round: an intervention's re-revision replaces the first), m₋ᵢ = mean_{j≠i} P_j the
others' allocations as i saw them when critiqued, and C_c critic c's allocation when it critiqued (P_c).

* L1 distance                     L1(p, q) = Σ_k |p_k − q_k|                                   (in [0, 2])
* JS divergence of two            JS(p, q) = H((p + q)/2) − (H(p) + H(q))/2, base 2   (``madbench.debate.control.jsd``)
* shift toward the others         shift_L1 = L1(P_i, m₋ᵢ) − L1(R_i, m₋ᵢ); shift_JS likewise with JS
                                  (> 0: i moved toward the others; m₋ᵢ is held fixed, so their moves don't count)
* pull toward a critic            pull_c = 1 − L1(R_i, C_c) / L1(P_i, C_c)   (undefined when L1(P_i, C_c) = 0)
                                  1: i moved exactly onto c's allocation; 0: no closer; < 0: further away
* flip                            i flips toward c when c critiqued i and c has the largest pull, pull_c ≥ ½
                                  (i closed at least half its distance to c)
* critics' evidence               K_i,t = ∪_{c critiqued i in t} (cited(P_c) ∪ cited(c's round-t critiques of i))
                                  (what the critics argued from: c's argument in effect when it critiqued, and the
                                  IDs its critique items of i cite, ``evidence_ids`` or bracketed in their text)
* new evidence                    new_i,t = |cited(R_i) − ∪_{s<t} cited(i's argument in effect after round s) − K_i,t|
                                  (IDs neither i nor its critics had cited: ``madbench.scoring.rules_scorer.cited_ids``;
                                  the count is ``new_evidence``, the IDs ``new_evidence_ids``; the IDs new to i that a
                                  critic had cited, i.e. adopted from it, are ``adopted_evidence_ids``; JSON lists)
* sycophancy                      syc_i,t = max_c clip(pull_c, 0, 1) if new_i,t = 0, else 0
                                  (movement toward a critic without evidence of its own: citing the critic's IDs back
                                  is following it, not answering it; null when nobody critiqued i)
* disagreement collapse           D_t = mean over pairs {j, k} of JS(A_j, A_k) of the allocations after round t
                                  (D_0: the proposals); collapse_t = D_{t−1} − D_t, rate_t = collapse_t / D_{t−1}
* turnover caused by the debate   L1(mean_i proposal_i, final allocation)
* oracle gap                      G = max_i r_i − r_agg: the best single agent's ex-post return (its final allocation
                                  backtested alone) minus the aggregate's (percentage points; > 0: hindsight
                                  would have picked one agent over the debate's aggregate). G grows with the number
                                  of agents k by selection alone, so it is reported beside its null:
* oracle gap null                 N_k = σ̂ · e_k, e_k = E[max of k iid N(0, 1)] = ∫ x · k φ(x) Φ(x)^{k−1} dx (the
                                  mean of the largest of k iid draws, whose density is k f F^{k−1}: David & Nagaraja,
                                  *Order Statistics*, 3rd ed., 2003, §2.1; tabled by Harter, Biometrika 48, 1961;
                                  integrated numerically by ``expected_max_normal``),
                                  σ̂ = s_k / c4(k) the unbiased estimate of the agents' cross-sectional SD (s_k: the
                                  sample SD, ddof 1, of the k agents' returns; c4(k) = √(2/(k−1)) Γ(k/2)/Γ((k−1)/2)).
                                  Under k agents whose returns are iid normal and an aggregate earning their mean
                                  (a mean of buy-and-hold portfolios earns the mean of their returns),
                                  E[G] = E[max_i r_i − mean_i r_i] = σ e_k = E[N_k]
* oracle gap excess               X = G − N_k (pp; 0 in expectation under that null for every k; > 0: the best agent
                                  beat the aggregate by more than selecting the best of k draws of noise would).
                                  Undefined (null, with ``oracle_gap_excess_reason``) for k = 1: the best of one
                                  agent is that agent, there is no dispersion to select on

Protocols without propose/critique/revise turns (the staged ones) have no dynamics: every column is null.
Self-consistency's samples (turns labelled ``propose:sample{i}``) are positions of their own (``<agent>:sample{i}``):
its turnover is the combination's move from the samples' mean, its oracle gap the best sample against it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import TypeAdapter

from madbench.debate.control import jsd, pairwise_js
from madbench.debate.events import AnyEvent, Turn
from madbench.debate.schemas import Argument
from madbench.eval.backtest import DEFAULT_CAPITAL, Window, evaluate, metrics_row, simulate, weight_vector
from madbench.scoring.audit import INLINE_ID
from madbench.scoring.rules_scorer import cited_ids

#: The key a position holds its cash weight under (no ticker can be spelt so).
CASH = "<cash>"
#: A flip toward a critic closes at least this share of the L1 distance to it.
FLIP_PULL = 0.5
#: rounds.parquet's dynamics columns, null on every row without a critique round (``round_dynamics``).
ROUND_COLUMNS = ("jsd_pairwise_before", "jsd_pairwise_after", "collapse", "collapse_rate",
                 "shift_l1_before", "shift_l1_after", "shift_l1", "shift_js_before", "shift_js_after", "shift_js",
                 "critics", "pulls", "new_evidence", "new_evidence_ids", "adopted_evidence_ids", "flip_toward", "flip_pull",
                 "sycophancy")
#: runs.parquet's dynamics columns (``run_dynamics``).
RUN_COLUMNS = ("debate_turnover", "shift_l1_mean", "shift_js_mean", "sycophancy_mean", "collapse_mean",
               "flips", "flips_new_evidence", "best_agent", "best_agent_return_pct", "oracle_gap_pct",
               "oracle_agents", "oracle_gap_null_pct", "oracle_gap_excess_pct", "oracle_gap_excess_reason")
_ARGUMENT: TypeAdapter[Argument] = TypeAdapter(Argument)

Position = dict[str, float]


# -- pure functions on positions ------------------------------------------------------------------------------

def position(weights: dict[str, float], cash: float | None) -> Position:
    """Ticker weights plus the cash weight under ``CASH``."""
    return {**weights, CASH: float(cash or 0.0)}


def l1(p: Position, q: Position) -> float:
    """L1(p, q) = Σ_k |p_k − q_k| over the union of keys (a missing key weighs 0), summed in key order so that the
    same positions give the same bits in every process (a set's order changes with the string hash seed)."""
    return float(sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in sorted(set(p) | set(q))))


def js(p: Position, q: Position) -> float:
    """JS(p, q) = H((p + q)/2) − (H(p) + H(q))/2, base 2, in [0, 1]: the two-distribution case of
    ``madbench.debate.control.jsd``."""
    return jsd([p, q])


def mean_position(positions: Sequence[Position]) -> Position:
    """The componentwise mean (1/n) Σ_i p_i."""
    keys = sorted({k for p in positions for k in p})
    return {k: sum(p.get(k, 0.0) for p in positions) / len(positions) for k in keys}


def shift_toward(before: Position, after: Position, others: Sequence[Position]) -> dict[str, float]:
    """shift = d(before, m) − d(after, m) with m the mean of ``others``, for d = L1 and d = JS (> 0: moved toward)."""
    m = mean_position(others)
    b1, a1, bj, aj = l1(before, m), l1(after, m), js(before, m), js(after, m)
    return {"shift_l1_before": b1, "shift_l1_after": a1, "shift_l1": b1 - a1,
            "shift_js_before": bj, "shift_js_after": aj, "shift_js": bj - aj}


def pull(before: Position, after: Position, critic: Position) -> float | None:
    """pull = 1 − L1(after, critic) / L1(before, critic); None when ``before`` already was the critic's allocation.
    Rounded to 12 places: float noise must not turn an exact half-way move into a miss of the flip threshold; and
    + 0.0, so that noise just below 0 rounds to 0.0, not to a -0.0 that the pulls JSON would print."""
    d = l1(before, critic)
    return None if d <= 1e-12 else round(1.0 - l1(after, critic) / d, 12) + 0.0


def flip(pulls: dict[str, float | None]) -> tuple[str | None, float | None]:
    """(c*, pull_c*) with c* = argmax_c pull_c (ties: the first critic id); c* is None when pull_c* < ½ (``FLIP_PULL``):
    a flip closes at least half the L1 distance to the critic."""
    known = {c: p for c, p in pulls.items() if p is not None}
    if not known:
        return None, None
    critic = max(sorted(known), key=lambda c: known[c])
    return (critic if known[critic] >= FLIP_PULL else None), known[critic]


def sycophancy(pulls: dict[str, float | None], new_evidence: int) -> float | None:
    """syc = max_c clip(pull_c, 0, 1) when new = 0, else 0; None when no critic's pull is defined. ``new_evidence`` is
    new_i,t, which leaves out the critics' own IDs (``new_evidence``): adopting them is no evidence of one's own."""
    known = [p for p in pulls.values() if p is not None]
    if not known:
        return None
    return 0.0 if new_evidence > 0 else float(min(1.0, max(0.0, max(known))))


def mean_pairwise_js(positions: dict[str, Position]) -> float:
    """D = mean over agent pairs of JS(A_j, A_k) (``madbench.debate.control.pairwise_js``); 0 for fewer than two agents."""
    pairs = pairwise_js(positions)
    return float(np.mean(list(pairs.values()))) if pairs else 0.0


def collapse(before: dict[str, Position], after: dict[str, Position]) -> dict[str, float | None]:
    """collapse = D_before − D_after and its rate (D_before − D_after) / D_before (None when D_before = 0)."""
    b, a = mean_pairwise_js(before), mean_pairwise_js(after)
    return {"jsd_pairwise_before": b, "jsd_pairwise_after": a, "collapse": b - a,
            "collapse_rate": (b - a) / b if b > 1e-12 else None}


def debate_turnover(proposals: Sequence[Position], final: Position) -> float:
    """L1(mean of the proposals, the final allocation): how far the debate moved the portfolio."""
    return l1(mean_position(proposals), final)


@functools.cache
def expected_max_normal(k: int) -> float:
    """e_k = E[max of k iid N(0, 1)] = ∫ x · k φ(x) Φ(x)^{k−1} dx: the mean of the largest order statistic, whose
    density is k f(x) F(x)^{k−1} (David & Nagaraja, *Order Statistics*, 3rd ed., 2003, §2.1), integrated by adaptive
    quadrature (scipy ``quad``, absolute error below 1e-10) over ℝ. e_1 = 0, e_2 = 1/√π, e_3 = 3/(2√π), e_5 ≈ 1.16296
    (Harter, Biometrika 48, 1961). Φ^{k−1} is taken as exp((k−1) log Φ) so that it does not underflow for large k."""
    from scipy.integrate import quad
    from scipy.special import log_ndtr

    if k < 1:
        raise ValueError(f"expected_max_normal: k = {k}; the maximum of k draws needs k >= 1")
    if k == 1:
        return 0.0
    def density(x: float) -> float:
        return x * k * math.exp(-0.5 * x * x + (k - 1) * float(log_ndtr(x))) / math.sqrt(2 * math.pi)
    value, _ = quad(density, -math.inf, math.inf, epsabs=1e-12, epsrel=1e-12, limit=200)
    return float(value)


def c4(k: int) -> float:
    """c4(k) = √(2/(k−1)) · Γ(k/2) / Γ((k−1)/2): E[s] = c4(k) σ for the sample SD s (ddof 1) of k iid normal draws,
    so s / c4(k) estimates σ without bias (the control-chart constant: Montgomery, *Introduction to Statistical Quality Control*, ch. 6).
    Computed in log-gamma, which stays finite for any k ≥ 2."""
    if k < 2:
        raise ValueError(f"c4: k = {k}; a sample SD needs k >= 2")
    return math.sqrt(2.0 / (k - 1)) * math.exp(math.lgamma(k / 2) - math.lgamma((k - 1) / 2))


def oracle_gap_null(returns: Sequence[float]) -> float | None:
    """N_k = e_k · s_k / c4(k): the expected oracle gap max_i r_i − mean_i r_i of k agents whose returns are iid normal
    with the SD of ``returns`` (s_k, ddof 1, made unbiased by c4); under that null E[max − mean] = σ e_k = E[N_k].
    None for k < 2: the best of one agent is no selection."""
    k = len(returns)
    if k < 2:
        return None
    return expected_max_normal(k) * float(np.std(np.asarray(returns, dtype=float), ddof=1)) / c4(k)


def oracle_gap(agent_returns: dict[str, float | None], aggregate: float | None) -> dict[str, Any]:
    """The best agent b = argmax_i r_i and r_b; the raw gap G = r_b − r_agg; k, the agents with a return; the null
    N_k (``oracle_gap_null``) and the excess X = G − N_k, with why X is undefined (one agent, no aggregate return).
    G is None without a return on both sides."""
    known = {a: r for a, r in agent_returns.items() if r is not None}
    if not known:
        return {"best_agent": None, "best_agent_return_pct": None, "oracle_gap_pct": None, "oracle_agents": 0,
                "oracle_gap_null_pct": None, "oracle_gap_excess_pct": None,
                "oracle_gap_excess_reason": "no agent has a backtested return"}
    best = max(sorted(known), key=lambda a: known[a])
    gap = known[best] - aggregate if aggregate is not None else None
    null = oracle_gap_null([known[a] for a in sorted(known)])
    reason = ("one agent: the best of one is no selection, so there is no null to exceed" if null is None
              else "no aggregate return" if gap is None else None)
    return {"best_agent": best, "best_agent_return_pct": known[best], "oracle_gap_pct": gap, "oracle_agents": len(known),
            "oracle_gap_null_pct": null, "oracle_gap_excess_pct": gap - null if gap is not None and null is not None else None,
            "oracle_gap_excess_reason": reason}


# -- reading a run's trace ------------------------------------------------------------------------------------

@dataclass
class DebateRecord:
    """What a propose/critique/revise debate did, by round (0: the proposals) and agent."""
    #: The allocation in effect after each round.
    positions: dict[int, dict[str, Position]] = field(default_factory=dict)
    #: The evidence IDs the argument in effect after each round cites.
    cited: dict[int, dict[str, set[str]]] = field(default_factory=dict)
    #: Who critiqued whom in each round: target → critics (sorted).
    critics: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    #: Which agents revised in each round.
    revised: dict[int, set[str]] = field(default_factory=dict)
    #: The evidence IDs each critic's critiques of a target cite, by round: target → critic → IDs.
    critique_cited: dict[int, dict[str, dict[str, set[str]]]] = field(default_factory=dict)


def cited(output: dict[str, Any]) -> set[str]:
    """The evidence IDs a proposal or revision (a turn's ``output``, any tier) cites."""
    return set(cited_ids(_ARGUMENT.validate_python(output)))


def critique_cited(item: dict[str, Any]) -> set[str]:
    """cited(critique item) = its ``evidence_ids`` (brackets dropped; the basic tier has none) ∪ the bracketed IDs
    (``madbench.scoring.audit.INLINE_ID``) in its critique text, suggested adjustment and portfolio implication."""
    text = " ".join(str(item.get(k) or "") for k in ("critique_text", "suggested_adjustment", "portfolio_implication"))
    return {str(i).strip("[]") for i in item.get("evidence_ids") or []} | set(INLINE_ID.findall(text))


def debate_record(events: Iterable[AnyEvent]) -> DebateRecord | None:
    """The record of a run's propose, critique and revise turns; None when it has no proposals (staged protocols)."""
    turns = [e for e in events if isinstance(e, Turn) and e.phase in ("propose", "critique", "revise")]
    rec = DebateRecord()
    for e in turns:
        if e.phase == "critique":
            for item in e.output.get("critiques", []):
                targets = rec.critics.setdefault(e.round, {}).setdefault(item["target_agent"], [])
                if e.agent not in targets:
                    targets.append(e.agent)
                    targets.sort()
                by_critic = rec.critique_cited.setdefault(e.round, {}).setdefault(item["target_agent"], {})
                by_critic.setdefault(e.agent, set()).update(critique_cited(item))
            continue
        if e.weights is None or (e.phase == "revise" and 0 not in rec.positions):
            continue  # no allocation, or a revision of nothing (madbench always proposes first)
        # Proposals are step 0 whatever their round (traces before 0.2 numbered them round 1); revisions their round.
        step = 0 if e.phase == "propose" else e.round
        if step not in rec.positions and step > 0:  # a new round starts from what the last one left
            last = max(rec.positions)
            rec.positions[step], rec.cited[step] = dict(rec.positions[last]), dict(rec.cited[last])
        # A proposal under its own label (self-consistency's propose:sample{i}) is one more position, not a retry.
        who = e.agent if e.phase == "revise" or e.label == "propose" else f"{e.agent}:{e.label.removeprefix('propose:')}"
        rec.positions.setdefault(step, {})[who] = position(e.weights, e.cash)
        rec.cited.setdefault(step, {})[who] = cited(e.output)
        if e.phase == "revise":
            rec.revised.setdefault(step, set()).add(who)
    return rec if 0 in rec.positions else None


def _agent_round(rec: DebateRecord, t: int, agent: str, earlier: set[str]) -> dict[str, Any]:
    before, after = rec.positions[t - 1], rec.positions[t]
    others = [before[j] for j in sorted(before) if j != agent]
    row: dict[str, Any] = shift_toward(before[agent], after[agent], others) if others else {}
    critics = [c for c in rec.critics.get(t, {}).get(agent, []) if c in before]
    if not critics:
        return row
    pulls = {c: pull(before[agent], after[agent], before[c]) for c in critics}
    new_ids, adopted = new_evidence(rec.cited[t][agent], earlier, critics_evidence(rec, t, agent, critics))
    toward, strongest = flip(pulls)
    return row | {"critics": ",".join(critics), "pulls": json.dumps(pulls, sort_keys=True), "new_evidence": len(new_ids),
                  "new_evidence_ids": json.dumps(new_ids), "adopted_evidence_ids": json.dumps(adopted),
                  "flip_toward": toward, "flip_pull": strongest, "sycophancy": sycophancy(pulls, len(new_ids))}


def critics_evidence(rec: DebateRecord, t: int, agent: str, critics: Sequence[str]) -> set[str]:
    """K_i,t = ∪_c (cited(P_c) ∪ cited(c's round-t critiques of i)) over ``critics``: the IDs the critics argued from."""
    said = rec.critique_cited.get(t, {}).get(agent, {})
    return set().union(*(rec.cited[t - 1].get(c, set()) | said.get(c, set()) for c in critics))


def new_evidence(revision: set[str], earlier: set[str], critics: set[str]) -> tuple[list[str], list[str]]:
    """(sorted revision − earlier − critics, sorted (revision − earlier) ∩ critics): the IDs new to the exchange, and
    the IDs new to the agent that it adopted from its critics (which are not evidence of its own)."""
    fresh = revision - earlier
    return sorted(fresh - critics), sorted(fresh & critics)


def round_dynamics(events: Iterable[AnyEvent]) -> dict[tuple[int, str], dict[str, Any]]:
    """Every ``ROUND_COLUMNS`` value per (round, agent) of rounds 1..T; absent keys (and staged protocols) are null."""
    rec = debate_record(events)
    return _rounds(rec) if rec else {}


def _rounds(rec: DebateRecord) -> dict[tuple[int, str], dict[str, Any]]:
    out: dict[tuple[int, str], dict[str, Any]] = {}
    rounds = sorted(t for t in rec.positions if t > 0)
    for t in rounds:
        revised = rec.revised.get(t, set())
        everyone = set(rec.positions[t - 1]) <= revised
        per_round = collapse(rec.positions[t - 1], rec.positions[t]) if everyone else {}
        for agent in sorted(revised & set(rec.positions[t - 1])):
            earlier = set().union(*(rec.cited[s].get(agent, set()) for s in range(t)))
            out[(t, agent)] = dict.fromkeys(ROUND_COLUMNS) | per_round | _agent_round(rec, t, agent, earlier)
    return out


def _mean(values: Iterable[Any]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return float(np.mean(known)) if known else None


def run_dynamics(events: Iterable[AnyEvent], final: Position | None, agents: dict[str, dict[str, Any]],
                 aggregate_return: float | None) -> dict[str, Any]:
    """Every ``RUN_COLUMNS`` value of a run: shift_l1_mean, shift_js_mean = the means over its (round, agent) rows;
    sycophancy_mean = the mean over the critiqued rows; collapse_mean = (1/T) Σ_t collapse_t; flips = #critiqued rows
    with a flip, flips_new_evidence = those with new_i,t > 0; the debate's turnover from the proposals to ``final``
    (None for a run without one); and the oracle gap, its null and excess from ``agents`` (each agent's backtest
    metrics; ``oracle_gap``)."""
    events = list(events)
    rec = debate_record(events)
    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    if rec is None:
        return row
    per_agent = _rounds(rec)
    rows = list(per_agent.values())
    by_round = {t: r["collapse"] for (t, _), r in per_agent.items()}  # one collapse per round
    critiqued = [r for r in rows if r["critics"] is not None]
    row |= {"debate_turnover": debate_turnover(list(rec.positions[0].values()), final) if final is not None else None,
            "shift_l1_mean": _mean(r["shift_l1"] for r in rows), "shift_js_mean": _mean(r["shift_js"] for r in rows),
            "sycophancy_mean": _mean(r["sycophancy"] for r in critiqued), "collapse_mean": _mean(by_round.values()),
            "flips": sum(r["flip_toward"] is not None for r in critiqued) if critiqued else None,
            "flips_new_evidence": sum(r["flip_toward"] is not None and r["new_evidence"] > 0 for r in critiqued)
            if critiqued else None}
    return row | oracle_gap({a: m.get("total_return_pct") for a, m in agents.items()}, aggregate_return)


def final_positions(events: Iterable[AnyEvent]) -> dict[str, Position]:
    """Each debate agent's allocation in effect at the end (its last proposal or revision); {} for staged protocols."""
    rec = debate_record(events)
    return rec.positions[max(rec.positions)] if rec else {}


def agent_metrics(window: Window, finals: dict[str, Position], allow_cash: bool) -> dict[str, dict[str, Any]]:
    """Each agent's final allocation backtested alone over the run's window (one vectorised simulation). Weights and
    cash are scaled to sum to exactly 1: a turn's validation lets them sum to 1 ± 0.001 (``madbench.debate.validation``)."""
    agents = sorted(finals)
    if not agents:
        return {}
    W = np.array([weight_vector({k: v / sum(finals[a].values()) for k, v in finals[a].items() if k != CASH}, window.tickers,
                                allow_cash, f"agent {a}'s final allocation")[0] for a in agents])
    curves, cash0 = simulate(window, W, DEFAULT_CAPITAL)
    arrays = evaluate(window, curves, W, cash0, DEFAULT_CAPITAL)
    return {a: metrics_row(arrays, k, spy_missing=window.spy is None).model_dump(mode="json") for k, a in enumerate(agents)}


# -- tables -------------------------------------------------------------------------------------------------

def critique_pairs(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per critique received (run, round, critic → target) from rounds.parquet's ``pulls``: its pull,
    whether the target flipped toward that critic, and whether the revision cited new evidence."""
    columns = ["run_id", "round", "critic", "target", "pull", "flip", "new_evidence"]
    if "pulls" not in rounds.columns:
        return pd.DataFrame(columns=columns)
    rows = []
    for r in rounds[rounds["pulls"].notna()].to_dict("records"):
        for critic, p in json.loads(r["pulls"]).items():
            rows.append({"run_id": r["run_id"], "round": r["round"], "critic": critic, "target": r["agent_id"], "pull": p,
                         "flip": r["flip_toward"] == critic, "new_evidence": bool(r["new_evidence"] > 0)})
    return pd.DataFrame(rows, columns=columns)
