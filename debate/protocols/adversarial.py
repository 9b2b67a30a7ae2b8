"""`adversarial`: the adversarial investment committee (PAPER_NOTES §6).

planner fact base → bull thesis → bear attacks the bull's strongest claim → bull rebuts with no new
evidence → (optional second bear turn: "what I would change") → independent risk auditor → CIO verdict
with position sizes, a stop-loss and a confidence. Provider fallback is the gateway's: give the model
spec `fallbacks`, and each turn is tagged with the model that produced it.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict

from madbench.debate.config import AgentConfig, DebateConfig
from madbench.debate.context import RunContext
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.desks import stage_task
from madbench.debate.protocols.plan import Call, Plan, Step, stage
from madbench.debate.protocols.staged import Staged, ask_stage, known_ids_check
from madbench.debate.rules import staged_answers as rules
from madbench.debate.schemas import Claim, PositionRationale, Proposal
from madbench.debate.stage_schemas import Attack, CIOVerdict, FactBase, Rebuttal, RiskScorecard, Thesis

P = "adversarial"


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: The author's "what I would change": a second bear turn on the rebuttal.
    extra_bear_round: bool = False


# The committee's stages, in order: what each is asked, by whom, and which earlier answers its prompt shows.
PLANNER = stage("planner", "planner", FactBase)
BULL_THESIS = stage("bull_thesis", "bull", Thesis, ("planner",))
#: The thesis is the part with a claim graph: CRIT grades it (the bull, round 1).
THESIS_CRIT = Call(kind="crit", role="bull", phase="crit", sees=("bull_thesis",), round=1)
BEAR_ATTACK = stage("bear_attack", "bear", Attack, ("planner", "bull_thesis"))
BULL_REBUTTAL = stage("bull_rebuttal", "bull", Rebuttal, ("bull_thesis", "bear_attack"))
BEAR_CHANGES = stage("bear_changes", "bear", Attack, ("bull_thesis", "bull_rebuttal"), round=2)
#: Independent of the debate: the memo and the proposed book, not the arguments.
RISK_AUDITOR = stage("risk_auditor", "risk_auditor", RiskScorecard, context=("book",))


def cio(opt: Options) -> Call:
    """The CIO sees the whole debate (with the bear's second turn when there is one) and the risk scorecard."""
    debate = ("bull_thesis", "bear_attack", "bull_rebuttal") + (("bear_changes",) if opt.extra_bear_round else ())
    return stage("cio", "cio", CIOVerdict, debate + ("risk_auditor",))


def stages(opt: Options) -> list[Call]:
    """The stages one run asks, one after another."""
    second = [BEAR_CHANGES] if opt.extra_bear_round else []
    return [PLANNER, BULL_THESIS, THESIS_CRIT, BEAR_ATTACK, BULL_REBUTTAL, *second, RISK_AUDITOR, cio(opt)]


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """Every stage once, one after another (``stages``)."""
    steps = tuple(Step(c.kind, (c,)) for c in stages(Options.model_validate(cfg.options)))
    return Plan(protocol=P, prompts="stages", rounds=0, steps=steps)


def strongest_claim(thesis: Thesis) -> str:
    """The bull's strongest claim: highest stated strength, the earliest on a tie."""
    return max(thesis.claims, key=lambda c: (c.strength, -thesis.claims.index(c))).claim_id


def _alloc(a):
    return a.allocation, a.cash_weight


def thesis_as_proposal(thesis: Thesis, universe: list[str]):
    """The bull's thesis in the paper's claim graph (claims → positions), so the audit and CRIT can grade it.

    B<n> becomes C<n>; a claim moves the tickers its text names; each held ticker is supported by the claims
    that name it.
    """
    named = {c.claim_id: [t for t in universe if t in c.text.replace(",", " ").split()] for c in thesis.claims}
    claims = [Claim(claim_id="C" + c.claim_id[1:], claim_text=c.text, claim_type="thesis", reasoning_type="observational",
                    evidence_ids=c.evidence_ids, impacts_positions=named[c.claim_id], confidence=c.strength)
              for c in thesis.claims]
    held = [h.ticker for h in thesis.allocation if h.weight > 0]
    rationale = [PositionRationale(ticker=t, supporting_claims=["C" + k[1:] for k, ts in named.items() if t in ts]) for t in held]
    return Proposal(thesis=thesis.summary, allocation=thesis.allocation, cash_weight=thesis.cash_weight, claims=claims,
                    position_rationale=rationale)


async def run(ctx: RunContext) -> Outcome:
    opt = Options.model_validate(ctx.config.options)
    memo_ids = ctx.memo_ids
    facts, _, _ = await ask_stage(ctx, stage_task(ctx, P, PLANNER.kind, PLANNER.role), FactBase, {"memo": ctx.memo_text},
                                  lambda f: known_ids_check(f, memo_ids, "the memo"))
    fact_json = facts.model_dump_json(indent=1)
    thesis, thesis_w, _ = await ask_stage(
        ctx, stage_task(ctx, P, BULL_THESIS.kind, BULL_THESIS.role, inputs={"facts": facts.model_dump(mode="json")}),
        Thesis,
        {"facts": fact_json}, lambda t: known_ids_check(t, memo_ids, "the memo"), allocation=_alloc)
    target = strongest_claim(thesis)
    # The thesis is the part with a claim graph: the deterministic audit and CRIT grade it.
    crit = await ctx.crit(AgentConfig(role=THESIS_CRIT.role), THESIS_CRIT.round, thesis_as_proposal(thesis, ctx.universe), [])

    def check_attack(a: Attack) -> list[str]:
        wrong = [] if a.target_claim == target else [f"target_claim must be the bull's strongest claim, {target} "
                                                      f"(highest strength), not {a.target_claim!r}"]
        return wrong + known_ids_check(a, memo_ids, "the memo")
    attack_inputs = {"facts": facts.model_dump(mode="json"), "thesis": thesis.model_dump(mode="json"), "target": target}
    attack, _, _ = await ask_stage(ctx, stage_task(ctx, P, BEAR_ATTACK.kind, BEAR_ATTACK.role, inputs=attack_inputs),
                                   Attack,
                                   {"facts": fact_json, "thesis": thesis.model_dump_json(indent=1), "target": target}, check_attack,
                                   enums={"target_claim": [target]})
    debated_ids = {i for c in thesis.claims for i in c.evidence_ids} | set(attack.evidence_ids)

    def check_rebuttal(r: Rebuttal) -> list[str]:  # the rebuttal may not bring new evidence
        return known_ids_check(r, debated_ids, "the evidence already cited by the thesis and the attack (no new evidence)")
    rebuttal, rebuttal_w, _ = await ask_stage(
        ctx, stage_task(ctx, P, BULL_REBUTTAL.kind, BULL_REBUTTAL.role,
                        inputs={**attack_inputs, "attack": attack.model_dump(mode="json")}),
        Rebuttal, {"thesis": thesis.model_dump_json(indent=1), "attack": attack.model_dump_json(indent=1)}, check_rebuttal,
        allocation=_alloc, visible_ids=debated_ids)
    second = None
    if opt.extra_bear_round:
        second, _, _ = await ask_stage(
            ctx, stage_task(ctx, P, BEAR_CHANGES.kind, BEAR_CHANGES.role, inputs={
                "thesis": thesis.model_dump(mode="json"), "rebuttal": rebuttal.model_dump(mode="json")},
                round_=BEAR_CHANGES.round),
            Attack, {"thesis": thesis.model_dump_json(indent=1), "rebuttal": rebuttal.model_dump_json(indent=1), "target": target},
            check_attack, label=BEAR_CHANGES.kind, enums={"target_claim": [target]})
    proposed = json.dumps(rebuttal_w, indent=1)
    card, _, _ = await ask_stage(ctx, stage_task(ctx, P, RISK_AUDITOR.kind, RISK_AUDITOR.role, inputs={"proposed": rebuttal_w}),
                                 RiskScorecard, {"memo": ctx.memo_text, "proposed": proposed},
                                 lambda c: known_ids_check(c, memo_ids, "the memo"))
    debate = {"thesis": thesis.model_dump(mode="json"), "attack": attack.model_dump(mode="json"),
              "rebuttal": rebuttal.model_dump(mode="json"), "changes": second.model_dump(mode="json") if second else None}
    last = cio(opt)
    verdict, weights, cash = await ask_stage(
        ctx, stage_task(ctx, P, last.kind, last.role, inputs={**debate, "scorecard": card.model_dump(mode="json")}), CIOVerdict,
        {"debate": json.dumps(debate, indent=1), "scorecard": card.model_dump_json(indent=1)}, allocation=_alloc)
    scores = {k: getattr(card, k).score for k in ("valuation", "liquidity", "macro_exposure", "regulatory", "execution")}
    return Outcome(weights=weights, cash=cash, method=f"adversarial:cio:{verdict.decision}", rounds_run=2 if second else 1,
                   rho_bar=crit.rho, rho_by_round=[crit.rho], extras={"cio_decision": verdict.decision, "stop_loss_pct": verdict.stop_loss_pct,
                                         "cio_confidence": verdict.confidence, "risk_scorecard": scores,
                                         "risk_mean": round(sum(scores.values()) / len(scores), 3),
                                         "attacked_claim": target, "thesis_weights": thesis_w})


class Adversarial(Staged):
    """The adversarial investment committee: planner, bull, bear, risk auditor, CIO."""
    name = P
    Options = Options
    rule_answers = {"planner": rules.planner, "bull_thesis": rules.bull_thesis, "bear_attack": rules.bear_attack,
                    "bear_changes": rules.bear_attack, "bull_rebuttal": rules.bull_rebuttal,
                    "risk_auditor": rules.risk_auditor, "cio": rules.cio}

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        return plan(cfg, desks)

    async def run(self, ctx: RunContext) -> Outcome:
        return await run(ctx)
