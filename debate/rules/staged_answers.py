"""Rule-based answers for the staged protocols' stages (adversarial, desks, tradingagents). No LLM.

Each answer is computed from exactly what the stage was given (its StageTask: a memo slice and earlier
outputs), cites real evidence IDs, and satisfies the stage's checks, so a staged protocol runs end to end
offline and deterministically. Labelled non-LLM wherever it appears.
"""

from __future__ import annotations

import math

from madbench.debate.rules.analyst import EvidenceView, allocate, fix_rounding, score_tickers
from madbench.debate.rules.macro import regime
from madbench.debate.rules.sentiment import SentimentAnalyst
from madbench.debate.rules.technical import TechnicalAnalyst
from madbench.debate.rules.value import ValueAnalyst
from madbench.debate.schemas import Holding
from madbench.debate.stage_schemas import (
    Argument,
    Attack,
    CIOVerdict,
    DebateMap,
    DeskReport,
    Fact,
    FactBase,
    InvalidationCondition,
    PMDecision,
    Point,
    Rebuttal,
    RiskScore,
    RiskScorecard,
    RiskView,
    Ruling,
    Synthesis,
    Thesis,
    ThesisClaim,
    TickerSignal,
    TickerView,
    TradePlan,
    WeightCap,
)
from madbench.debate.task import StageTask
from madbench.debate.validation import cap_weights

SIGN = {"strong_buy": 1, "buy": 1, "neutral": 0, "sell": -1, "strong_sell": -1}


def _signal(z: float) -> tuple[str, str]:
    signal = "strong_buy" if z > 1 else "buy" if z > 0.3 else "strong_sell" if z < -1 else "sell" if z < -0.3 else "neutral"
    confidence = "high" if abs(z) > 1.2 else "medium" if abs(z) > 0.5 else "low"
    return signal, confidence


def _holdings(weights: dict[str, float]) -> list[Holding]:
    return [Holding(ticker=t, weight=w) for t, w in fix_rounding(weights).items()]


# -- desks and analysts

def desk(task: StageTask) -> DeskReport:
    view = EvidenceView(task)
    name = task.params["desk"]
    if name == "macro":
        stressed, inflationary = regime(view.macro)
        z = -0.8 if stressed else (0.2 if inflationary else 0.6)
        ids = [f"L1-{k}" for k in ("VIX", "HY", "CURVE", "CPI") if k in view.macro]
        sig, conf = _signal(z)
        return DeskReport(signals=[TickerSignal(ticker=t, signal=sig, confidence=conf) for t in task.universe],
                          key_points=[f"regime: {'stressed' if stressed else 'inflationary' if inflationary else 'benign'}"],
                          evidence_ids=ids, summary="Rule-based macro desk (non-LLM): one regime call for the whole universe.")
    analyst = {"fundamentals": ValueAnalyst, "technicals": TechnicalAnalyst, "sentiment": SentimentAnalyst}[name]()
    factors = [f for f in analyst.factors(view) if view.has(f.field)]
    if not factors:  # the slice has evidence, but no field this desk scores: say so, neutral and low
        return DeskReport(signals=[TickerSignal(ticker=t, signal="neutral", confidence="low") for t in task.universe],
                          key_points=[], evidence_ids=[],
                          summary=f"Rule-based {name} desk (non-LLM): none of this slice's fields is one it scores.")
    scores, used = score_tickers(view, factors)
    n = max(1, len(factors))
    signals = [TickerSignal(ticker=t, signal=_signal(scores[t] / math.sqrt(n))[0], confidence=_signal(scores[t] / math.sqrt(n))[1])
               for t in task.universe]
    ids = sorted({f"{t}-{f}" for t in task.universe for f in used[t]})
    best = max(task.universe, key=lambda t: (scores[t], t))
    return DeskReport(signals=signals, key_points=[f"{best} leads the {name} screen ({scores[best]:+.2f})"], evidence_ids=ids,
                      summary=f"Rule-based {name} desk (non-LLM): signed z-scores of {', '.join(f.field for f in factors)}.")


def _net(task: StageTask) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Confidence-weighted net signal per ticker over the desk reports, and each ticker's cited IDs."""
    weight = {"high": 1.0, "medium": 0.6, "low": 0.3}
    net = {t: 0.0 for t in task.universe}
    ids: dict[str, list[str]] = {t: [] for t in task.universe}
    for report in task.inputs["reports"].values():
        for s in report["signals"]:
            net[s["ticker"]] += SIGN[s["signal"]] * weight[s["confidence"]]
        for i in report["evidence_ids"]:
            head = i.split("-", 1)[0]
            if head in ids:
                ids[head].append(i)
    return net, ids


def researcher(task: StageTask) -> Argument:
    net, ids = _net(task)
    side = 1 if task.stage == "bull" else -1
    ranked = sorted(task.universe, key=lambda t: (-side * net[t], t))
    favoured = [t for t in ranked if side * net[t] > 0][:3] or ranked[:1]
    points = [Point(text=f"{t}: desks net {net[t]:+.2f} ({'supports' if side * net[t] > 0 else 'weakest case against'} the {task.stage} case)",
                    evidence_ids=ids[t][:3]) for t in favoured]
    last = [h for h in task.inputs.get("history", []) if h["side"] != task.stage]
    rebuttal = (f"The {last[-1]['side']} case leans on {', '.join(last[-1]['favoured_tickers'])}; the desks net them "
                f"{', '.join(f'{net[t]:+.2f}' for t in last[-1]['favoured_tickers'] if t in net)}.") if last else "Opening statement."
    return Argument(points=points, rebuttal=rebuttal, favoured_tickers=favoured)


def debate_map(task: StageTask) -> DebateMap:
    net, _ = _net(task)
    reports = list(task.inputs["reports"].values())
    directions = {t: {SIGN[s["signal"]] for r in reports for s in r["signals"] if s["ticker"] == t} - {0} for t in task.universe}
    return DebateMap(agreements=[f"{t}: every directional desk agrees ({'buy' if net[t] > 0 else 'sell'})" for t in task.universe if len(directions[t]) == 1][:6],
                     disagreements=[f"{t}: desks split" for t in task.universe if len(directions[t]) > 1][:6],
                     unresolved=[f"{t}: no directional signal" for t in task.universe if not directions[t]][:6])


def research_manager(task: StageTask) -> Ruling:
    net, ids = _net(task)
    mean = sum(net.values()) / len(net)
    ruling = "bull" if mean > 0.15 else "bear" if mean < -0.15 else "neither"
    weakest = min(task.universe, key=lambda t: (net[t], t)) if ruling != "bear" else max(task.universe, key=lambda t: (net[t], t))
    metric = next((i for t in task.universe for i in ids[t]), None)
    conditions = [InvalidationCondition(condition=f"the desks' net signal on {weakest} changes sign",
                                        metric_id=metric or "L1-VIX", threshold=0.0)]
    gaps = [f"no {d} evidence" for d, r in task.inputs["reports"].items() if not r["evidence_ids"]]
    return Ruling(ruling=ruling, strongest_counterexample=f"{weakest} nets {net[weakest]:+.2f} against the ruling's direction",
                  invalidation_conditions=conditions, evidence_gaps=gaps[:5],
                  disputes=task.inputs["debate_map"]["disagreements"][:5])


def synthesiser(task: StageTask) -> Synthesis:
    """Deliberately overconfident (conviction ±0.9 on every call), so the desks' ceiling has something to cap."""
    net, _ = _net(task)
    views = [TickerView(ticker=t, signal="buy" if net[t] >= 0 else "sell", conviction=0.9 if net[t] >= 0 else -0.9)
             for t in task.universe]
    return Synthesis(views=views, explanation="Rule-based synthesiser (non-LLM): direction of the desks' net signal, full conviction.",
                     departs_from_ruling=False)


# -- adversarial committee

def _technical(task: StageTask):
    view = EvidenceView(task)
    factors = TechnicalAnalyst().factors(view)
    return score_tickers(view, [f for f in factors if view.has(f.field)])


def planner(task: StageTask) -> FactBase:
    scores, used = _technical(task)
    facts = [Fact(fact_id=f"F{i}", text=f"{t} momentum-and-trend score {scores[t]:+.2f}", evidence_ids=[f"{t}-{f}" for f in used[t]][:4])
             for i, t in enumerate(sorted(task.universe, key=lambda t: (-scores[t], t)), start=1) if used[t]][:12]
    return FactBase(facts=facts or [Fact(fact_id="F1", text="no scored evidence", evidence_ids=[task.evidence[0].id])],
                    open_questions=["Does the trend persist through the quarter?"])


def bull_thesis(task: StageTask) -> Thesis:
    scores, used = _technical(task)
    weights = allocate(scores, task)
    held = sorted((t for t in task.universe if weights[t] > 0), key=lambda t: (-weights[t], t))
    claims = [ThesisClaim(claim_id=f"B{i}", text=f"{t} leads on momentum and trend ({scores[t]:+.2f})",
                          evidence_ids=[f"{t}-{f}" for f in used[t]][:4] or [task.evidence[0].id],
                          strength=round(1 / (1 + math.exp(-scores[t])), 3)) for i, t in enumerate(held[:6], start=1)]
    return Thesis(claims=claims, summary="Rule-based bull (non-LLM): the strongest trends.", allocation=_holdings(weights), cash_weight=0.0)


def bear_attack(task: StageTask) -> Attack:
    thesis = task.inputs["thesis"] if "thesis" in task.inputs else task.inputs["rebuttal"]
    target = task.params.get("target") or max(task.inputs["thesis"]["claims"], key=lambda c: c["strength"])["claim_id"]
    claim = next(c for c in task.inputs["thesis"]["claims"] if c["claim_id"] == target)
    ticker = claim["text"].split(" ", 1)[0]
    vol = [i.id for i in task.evidence if i.id in (f"{ticker}-VOL60", f"{ticker}-DD60", f"{ticker}-MDD1Y")]
    return Attack(target_claim=target, counterargument=f"{ticker}'s trend comes with its volatility and drawdown; momentum reverses.",
                  evidence_ids=vol or claim["evidence_ids"][:1], would_change=[f"cut {ticker}"] if thesis else [])


def bull_rebuttal(task: StageTask) -> Rebuttal:
    thesis = task.inputs["thesis"]
    attack = task.inputs["attack"]
    claim = next(c for c in thesis["claims"] if c["claim_id"] == attack["target_claim"])
    ticker = claim["text"].split(" ", 1)[0]
    weights = {h["ticker"]: h["weight"] for h in thesis["allocation"]}
    task_cap = task.constraints.max_weight
    cut = min(0.05, weights[ticker])
    receivers = sorted((t for t in weights if t != ticker and weights[t] > 0 and weights[t] + cut <= task_cap), key=lambda t: -weights[t])
    if receivers:
        weights[ticker] -= cut
        weights[receivers[0]] += cut
    return Rebuttal(response=f"The attack on {attack['target_claim']} stands in part: {ticker} trimmed by {cut if receivers else 0:.2f}.",
                    evidence_ids=claim["evidence_ids"][:2], concessions=[f"{ticker} carries drawdown risk"],
                    allocation=_holdings(weights), cash_weight=0.0)


def risk_auditor(task: StageTask) -> RiskScorecard:
    view = EvidenceView(task)
    held = [t for t, w in task.inputs["proposed"].items() if w > 0]
    vol = [view.values[(t, "VOL60")] for t in held if (t, "VOL60") in view.values]
    beta = [view.values[(t, "BETA")] for t in held if (t, "BETA") in view.values]
    v = sum(vol) / len(vol) if vol else 0.25
    b = sum(beta) / len(beta) if beta else 1.0
    stressed, _ = regime(view.macro)
    ids = [f"{t}-VOL60" for t in held if (t, "VOL60") in view.values][:3] + [f"L1-{k}" for k in ("VIX",) if k in view.macro]
    clamp = lambda x: max(1, min(5, int(round(x))))  # noqa: E731
    return RiskScorecard(valuation=RiskScore(score=3, note="no valuation multiples in the memo"),
                         liquidity=RiskScore(score=1, note="large caps"),
                         macro_exposure=RiskScore(score=clamp(2 + 2 * (b - 1) + (1 if stressed else 0)), note=f"mean beta {b:.2f}"),
                         regulatory=RiskScore(score=2, note="no filing evidence of regulatory action"),
                         execution=RiskScore(score=clamp(1 + 8 * v), note=f"mean 60-day volatility {v:.2f}"), evidence_ids=ids)


def cio(task: StageTask) -> CIOVerdict:
    card = task.inputs["scorecard"]
    mean = sum(card[k]["score"] for k in ("valuation", "liquidity", "macro_exposure", "regulatory", "execution")) / 5
    decision = "approve" if mean < 3 else "reduce"
    book = task.inputs["rebuttal"]["allocation"]
    return CIOVerdict(decision=decision, allocation=[Holding(**h) for h in book], cash_weight=task.inputs["rebuttal"]["cash_weight"],
                      stop_loss_pct=round(8 + 2 * mean, 1), confidence=round(max(0.2, 1 - mean / 5), 2),
                      rationale=f"Rule-based CIO (non-LLM): mean risk {mean:.1f}/5, so {decision}.")


# -- tradingagents

def trader(task: StageTask) -> TradePlan:
    net, ids = _net(task)
    weights = allocate(net, task)
    cited = sorted({i for t in task.universe if weights[t] > 0 for i in ids[t][:2]})
    return TradePlan(allocation=_holdings(weights), cash_weight=0.0, evidence_ids=cited,
                     rationale="Rule-based trader (non-LLM): rank-weighted by the analysts' net signal.")


def risk_team(task: StageTask) -> RiskView:
    stance = task.inputs["stance"]
    plan = task.inputs["plan"]
    cap = {"aggressive": None, "neutral": 0.35, "conservative": 0.25}[stance]
    caps = [] if cap is None else [WeightCap(ticker=t, max_weight=cap) for t, w in sorted(plan.items()) if w > cap][:10]
    return RiskView(stance=stance, caps=caps, comment=f"Rule-based {stance} risk analyst (non-LLM).")


def portfolio_manager(task: StageTask) -> PMDecision:
    """The trader's book under the neutral risk analyst's caps, where the held names can carry them."""
    plan = dict(task.inputs["plan"])
    neutral = next(v for v in task.inputs["risk"] if v["stance"] == "neutral")
    held = [t for t, w in plan.items() if w > 0]
    limit = min([c["max_weight"] for c in neutral["caps"]] + [task.constraints.max_weight])
    limit = max(limit, 1 / len(held))  # a cap the held names cannot carry is not applied below 1/holdings
    capped = cap_weights({t: plan[t] for t in held}, limit)
    weights = {t: round(capped.get(t, 0.0), 6) for t in task.universe}
    return PMDecision(decision="approve", allocation=_holdings(weights), cash_weight=0.0,
                      rationale=f"Rule-based portfolio manager (non-LLM): the trader's book capped at {limit:.2f}.")
