"""A jury: N jurors each propose an allocation, then each votes for one proposal; the plurality's proposal is held
(a tie goes to the earliest proposal among the tied).

A protocol of a researcher's own, outside madbench: a debate config names it ``protocol: jury:Jury``, and madbench
imports this file from the config's folder. It declares what madbench reads (its plan, options, stage prompts,
rule-based answers and a run metric); nothing in madbench names it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.events import Turn
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.plan import Plan, Step, stage
from madbench.debate.protocols.protocol import Protocol
from madbench.debate.protocols.staged import ask_stage, known_ids_check
from madbench.debate.run_metrics import RunView
from madbench.debate.schemas import Holding
from madbench.debate.task import StageTask

PROPOSAL, VOTE = "proposal", "vote"


class JuryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    jurors: int = Field(3, ge=2, le=12)


# -- answer schemas ----------------------------------------------------------------------------------

class JurorProposal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allocation: list[Holding]
    cash_weight: float = Field(ge=0.0, le=1.0)
    rationale: str
    evidence_ids: list[str]


class Vote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    proposal: str            # "P1" … "PN"
    reason: str


def proposal_id(i: int) -> str:
    return f"P{i + 1}"


# -- rule-based answers (the offline ``rules/auto`` model) -------------------------------------------

def rule_proposal(task: StageTask) -> JurorProposal:
    """Juror j holds, equally weighted, the fewest names the constraints allow, ranked by one memo feature of its own
    (the j-th of the features every ticker has), highest first."""
    j, c, universe = int(task.params["juror"]), task.constraints, task.universe
    by_ticker: dict[str, dict[str, tuple[str, float]]] = {}
    for item in task.evidence:
        ticker, _, feature = item.id.partition("-")
        if ticker in universe and isinstance(item.value, (int, float)):
            by_ticker.setdefault(ticker, {})[feature] = (item.id, float(item.value))
    common = sorted(set.intersection(*(set(f) for f in by_ticker.values()))) if len(by_ticker) == len(universe) else []
    feature = common[j % len(common)] if common else ""
    ranked = sorted(universe, key=lambda t: (-by_ticker[t][feature][1] if feature else 0.0, t))
    n = max(c.min_holdings, math.ceil(1 / c.max_weight - 1e-9))
    n = min(len(universe), n if c.max_tickers is None else min(n, c.max_tickers))
    held = ranked[:n]
    each = math.floor(1e6 / n) / 1e6
    weights = {t: each for t in held}
    weights[held[0]] = round(weights[held[0]] + 1 - each * n, 6)
    cited = [by_ticker[t][feature][0] for t in held] if feature else []
    return JurorProposal(allocation=[Holding(ticker=t, weight=weights.get(t, 0.0)) for t in universe], cash_weight=0.0,
                         rationale=f"Rule-based juror {j + 1} (non-LLM): the top {n} by {feature or 'name'}.",
                         evidence_ids=cited)


def rule_vote(task: StageTask) -> Vote:
    """Juror j votes for the other proposal nearest its own in L1 distance (the earliest on a tie)."""
    proposals: dict[str, dict[str, float]] = task.inputs["proposals"]
    own = task.inputs["own"]
    mine = proposals[own]
    others = [p for p in proposals if p != own] or [own]
    choice = min(others, key=lambda p: (sum(abs(proposals[p].get(t, 0.0) - mine.get(t, 0.0)) for t in task.universe),
                                        int(p[1:])))
    return Vote(proposal=choice, reason=f"Rule-based juror (non-LLM): {choice} is nearest my own proposal {own}.")


# -- the run metric ----------------------------------------------------------------------------------

def winner_vote_share(run: RunView) -> float | None:
    """The share of the jurors' votes the held proposal won: max_p votes(p) / votes (read from the trace)."""
    votes = Counter(e.output["proposal"] for e in run.events if isinstance(e, Turn) and e.phase == VOTE)
    return max(votes.values()) / sum(votes.values()) if votes else None


# -- the protocol ------------------------------------------------------------------------------------

class Jury(Protocol):
    Options = JuryOptions
    prompts = "stages"
    stage_prompts = Path(__file__).with_name("jury_prompts.yaml")
    rule_answers = {PROPOSAL: rule_proposal, VOTE: rule_vote}
    metrics = ("jury:winner_vote_share",)

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        """Every juror proposes (concurrently), then every juror, shown all proposals, votes (concurrently)."""
        n = JuryOptions.model_validate(cfg.options).jurors
        propose = stage(PROPOSAL, "juror", JurorProposal, count=n)
        vote = stage(VOTE, "juror", Vote, (PROPOSAL,) * n, count=n)
        return Plan(protocol=cfg.protocol, prompts="stages", rounds=0,
                    steps=(Step(PROPOSAL, (propose,)), Step(VOTE, (vote,))))

    async def run(self, ctx: RunContext) -> Outcome:
        n = JuryOptions.model_validate(ctx.config.options).jurors
        ids = [proposal_id(i) for i in range(n)]

        def task(i: int, stage_: str, inputs: dict | None = None) -> StageTask:
            return StageTask(protocol=ctx.config.protocol, stage=stage_, role="juror", agent_id=f"juror{i + 1}",
                             universe=ctx.universe, constraints=ctx.constraints, evidence=ctx.memo.items,
                             inputs=inputs or {}, params={"juror": i})

        def numbered(i: int) -> dict[str, object]:
            # each juror's prompt names the juror: the same prompt would be one cached answer for all of them
            return {"juror": i + 1, "jurors": n, "memo": ctx.memo_text}

        proposals = await gather_turns(*(ask_stage(
            ctx, task(i, PROPOSAL), JurorProposal, numbered(i), lambda a: known_ids_check(a, ctx.memo_ids, "the memo"),
            allocation=lambda a: (a.allocation, a.cash_weight)) for i in range(n)))
        books = {ids[i]: w for i, (_, w, _) in enumerate(proposals)}
        shown = {ids[i]: {"weights": w, "cash": cash, "rationale": a.rationale} for i, (a, w, cash) in enumerate(proposals)}
        votes = await gather_turns(*(ask_stage(
            ctx, task(i, VOTE, {"proposals": books, "own": ids[i]}), Vote,
            numbered(i) | {"proposals": json.dumps(shown, indent=1), "own": ids[i]}, enums={"proposal": ids})
            for i in range(n)))
        tally = Counter(v.proposal for v, _, _ in votes)
        winner = min(ids, key=lambda p: (-tally[p], ids.index(p)))
        i = ids.index(winner)
        return Outcome(weights=proposals[i][1], cash=proposals[i][2], method="jury:plurality", rounds_run=1,
                       rho_bar=None, extras={"winner": winner, "votes": {p: tally[p] for p in ids}})
