"""Scoring one agent's revision with CRIT through the gateway (LLM or ``rules/crit``)."""

from __future__ import annotations

from madbench.debate.grading import CritScore
from madbench.debate.schemas import BasicRevision, Revision, json_schema
from madbench.gateway import LLMRequest, Message
from madbench.scoring.crit import CritAnswer, apply_caps
from madbench.scoring.prompts import ScorerPrompt, load_scorer_prompt
from madbench.scoring.rubric import Rubric, load_rubric
from madbench.scoring.rules_scorer import CitedEvidence, CritTask

CRIT_VARIABLES = frozenset({"memo_ids", "agent_id", "role", "round", "before", "argument", "evidence", "critiques", "pillars"})


def load_crit_prompt(directory: str | None = None) -> ScorerPrompt:
    return load_scorer_prompt("crit", CRIT_VARIABLES, directory)


def _value_text(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _evidence_lines(evidence: list[CitedEvidence]) -> list[dict[str, str]]:
    """Each cited item as the prompt shows it: its value as text, its unit unless the value is itself text."""
    return [{"id": e.id, "label": e.label, "value": _value_text(e.value), "unit": "" if e.unit == "text" else e.unit,
             "as_of": e.as_of or "n/a"} for e in evidence]


def render_crit(task: CritTask, rubric: Rubric | None = None, prompt: ScorerPrompt | None = None) -> tuple[str, str]:
    """(system, user) for one CRIT request: the same text whichever model is asked.

    Like the paper's CRIT judge (App. B.15) it shows what the revision revised (``before``: the proposal in
    round 1, the previous revision after), the critiques, the revised argument, and the memo values of the
    evidence the argument cites."""
    prompt = prompt or load_crit_prompt()
    rubric = rubric or load_rubric("uniform")
    pillars = {k: {"label": d.label, "description": d.description} for k, d in rubric.for_role(task.role).items()}
    before = None if task.before is None else {
        "kind": "revision from the previous round" if isinstance(task.before, (Revision, BasicRevision)) else "proposal",
        "text": task.before.model_dump_json(indent=1)}
    user = prompt.render(memo_ids=task.memo_ids, agent_id=task.agent_id, role=task.role, round=task.round, pillars=pillars,
                         before=before, argument=task.argument.model_dump_json(indent=1),
                         evidence=_evidence_lines(task.evidence),
                         critiques=[{"from_agent": c.from_agent, "target_claim": c.item.target_claim,
                                     "critique_text": c.item.critique_text} for c in task.critiques])
    return prompt.system, user


def finish(task: CritTask, answer: CritAnswer, scorer: str, is_llm: bool, rubric: Rubric | None = None) -> CritScore:
    """Enforce the count-implied caps (recording every clip) and compute ρ_i under the rubric."""
    rubric = rubric or load_rubric("uniform")
    capped, clips = apply_caps(answer.scores, answer.diagnostics)
    return CritScore(agent_id=task.agent_id, role=task.role, round=task.round, scorer=scorer, is_llm=is_llm,
                     scores=capped, raw_scores=answer.scores, clips=clips, diagnostics=answer.diagnostics,
                     rho=rubric.rho(task.role, capped), rubric=rubric.name, explanations=answer.explanations)


def crit_request(task: CritTask, rubric: Rubric, model: str, temperature: float = 0.0, max_tokens: int | None = None):
    """The gateway request for one CRIT call: identical for every model; providers adapt only the transport."""
    system, user = render_crit(task, rubric)
    return LLMRequest(model=model, temperature=temperature, max_tokens=max_tokens,
                      response_schema=json_schema(CritAnswer),
                      messages=[Message(role="system", content=system), Message(role="user", content=user)],
                      context=task.model_dump(mode="json"))
