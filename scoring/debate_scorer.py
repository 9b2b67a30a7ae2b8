"""CRIT and RCA inside a running debate: the ``madbench.debate.grading.Scorer`` that the runner hands to every run."""

from __future__ import annotations

from typing import Any

from madbench.debate.config import AgentConfig, DebateConfig
from madbench.debate.context import RunContext
from madbench.debate.events import RCA, Crit
from madbench.debate.grading import CritScore, RCAVerdict
from madbench.debate.schemas import json_schema
from madbench.debate.validation import parse_json
from madbench.scoring.audit import audit_turn
from madbench.scoring.crit import CritAnswer
from madbench.scoring.crit_judge import crit_request, finish, load_crit_prompt
from madbench.scoring.prompts import load_scorer_prompt
from madbench.scoring.rca_judge import RCA_VARIABLES, RCATask
from madbench.scoring.rubric import Rubric, load_rubric
from madbench.scoring.rules_scorer import CritTask, cited_evidence


def crit_scorer(config: DebateConfig) -> DebateScorer:
    """The CRIT and RCA judges, on the config's rubric; its CRIT prompt and rubric are loaded now, so a bad name
    fails before any call."""
    load_crit_prompt()
    return DebateScorer(load_rubric(config.crit_rubric))


class DebateScorer:
    def __init__(self, rubric: Rubric):
        self.rubric = rubric

    async def crit(self, ctx: RunContext, agent: AgentConfig, round_: int, argument, received: list[tuple[str, Any]],
                   label: str = "crit", before=None) -> CritScore:
        """Grade ``argument`` (a revision, or a proposal graded alone) beside ``before``, what it revised (the agent's
        proposal in round 1, its previous revision after), the critiques it received and the memo values it cites."""
        task = CritTask(agent_id=agent.agent_id, role=agent.role, round=round_, memo_ids=sorted(ctx.memo_ids),
                        argument=argument, critiques=[{"from_agent": a, "item": i} for a, i in received], before=before,
                        evidence=cited_evidence(argument, ctx.memo.items))
        request = crit_request(task, self.rubric, "unused")
        c = await ctx.complete(who=agent.agent_id, role=agent.role, phase="crit", round_=round_,
                               system=request.messages[0].content, user=request.messages[1].content,
                               schema=request.response_schema, context=request.context,
                               temperature=ctx.config.crit_temperature,
                               validate=lambda content, spec: parse_json(content, CritAnswer), label=label)
        score = finish(task, c.value, c.model_used, c.is_llm, self.rubric)
        audit = audit_turn(argument, ctx.memo_ids, received)
        # The task is stored whole so that `madbench rescore` can grade it again without the debate.
        ctx.trace.write(Crit(agent=agent.agent_id, role=agent.role, round=round_, label=label,
                             score=score, audit=audit.model_dump(), task=task.stored()))
        return score

    async def rca(self, ctx: RunContext, agent: AgentConfig, phase: str, round_: int, before, after,
                  received: list[tuple[str, Any]]) -> RCAVerdict:
        task = RCATask(phase=phase, agent_id=agent.agent_id, before=before, after=after, memo_ids=sorted(ctx.memo_ids),
                       critiques=[{"from_agent": a, "item": i} for a, i in received])
        prompt = load_scorer_prompt("rca", RCA_VARIABLES)
        user = prompt.render(phase=phase, agent_id=agent.agent_id,
                             before=before.model_dump_json(indent=1) if before else "(none)",
                             after=after.model_dump_json(indent=1),
                             critiques=[{"from_agent": a, "target_claim": i.target_claim, "critique_text": i.critique_text}
                                        for a, i in received])
        c = await ctx.complete(who=agent.agent_id, role=agent.role, phase="rca", round_=round_, system=prompt.system,
                               user=user, schema=json_schema(RCAVerdict), context=task.model_dump(mode="json"),
                               temperature=ctx.config.crit_temperature,
                               validate=lambda content, spec: parse_json(content, RCAVerdict), label=f"rca:{phase}")
        ctx.trace.write(RCA(agent=agent.agent_id, phase=phase, round=round_, verdict=c.value))
        return c.value
