"""Scoring one agent's revision with CRIT through the gateway (LLM or ``rules/crit``)."""

from __future__ import annotations

from scoring.crit import CritAnswer, CritScore, apply_caps, rho
from scoring.prompts import ScorerPrompt, load_scorer_prompt
from scoring.rules_scorer import CritTask

CRIT_VARIABLES = frozenset({"memo_ids", "agent_id", "role", "round", "argument", "critiques"})


def load_crit_prompt(directory: str | None = None) -> ScorerPrompt:
    return load_scorer_prompt("crit", CRIT_VARIABLES, directory)


def render_crit(task: CritTask, prompt: ScorerPrompt | None = None) -> tuple[str, str]:
    """(system, user) for one CRIT request: the same text whichever model is asked."""
    prompt = prompt or load_crit_prompt()
    user = prompt.render(memo_ids=task.memo_ids, agent_id=task.agent_id, role=task.role, round=task.round,
                         argument=task.argument.model_dump_json(indent=1),
                         critiques=[{"from_agent": c.from_agent, "target_claim": c.item.target_claim,
                                     "critique_text": c.item.critique_text} for c in task.critiques])
    return prompt.system, user


def finish(task: CritTask, answer: CritAnswer, scorer: str, is_llm: bool) -> CritScore:
    capped, clips = apply_caps(answer.scores, answer.diagnostics)
    return CritScore(agent_id=task.agent_id, role=task.role, round=task.round, scorer=scorer, is_llm=is_llm,
                     scores=capped, raw_scores=answer.scores, clips=clips, diagnostics=answer.diagnostics, rho=rho(capped))
