"""The shapes of the calls whose prompts are a staged protocol's stages (its ``stage_prompts``)."""

from __future__ import annotations

from dataclasses import dataclass

from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.debate.context import constraints_text
from madbench.debate.protocols.plan import Call, Plan
from madbench.debate.protocols.staged import load_prompts
from madbench.debate.schemas import json_schema
from madbench.debate.validation import schema_outline
from madbench.runner.estimate.assumptions import (
    ANSWER_TOKENS,
    CITED_EVIDENCE_ITEMS,
    CONTEXT_TOKENS,
    JSON_REDUMP,
    OTHER_STAGE_ANSWER,
    STAGE_ANSWER_TOKENS,
    Calibration,
    tokens_of,
)
from madbench.runner.estimate.shapes import MemoInfo, Shape, id_list_extra, make_shape, text_tokens
from madbench.scoring.crit_judge import load_crit_prompt
from madbench.scoring.rubric import load_rubric


@dataclass(frozen=True)
class StageStep:
    """One step of a staged protocol: ``width`` concurrent calls of one stage (a list of shapes)."""
    shapes: tuple[Shape, ...]


def _crit_shape(cfg: DebateConfig, call: Call, memo: MemoInfo, answers: dict[str, float], n: int,
                calib: Calibration | None) -> Shape:
    """CRIT on a stage's answer, sized like the paper's CRIT on a proposal."""
    crit_prompt = load_crit_prompt()
    rubric = load_rubric(cfg.crit_rubric)
    pillars = {k: {"label": d.label, "description": d.description} for k, d in rubric.for_role(call.role).items()}
    user = crit_prompt.render(memo_ids=list(memo.ids), agent_id=call.role, role=call.role, round=1, pillars=pillars,
                              before=None, argument="", evidence=[], critiques=[])
    prompt = (text_tokens(crit_prompt.system, user) + sum(answers[s] for s in call.sees) * JSON_REDUMP
              + CITED_EVIDENCE_ITEMS * tokens_of(memo.line_chars) + id_list_extra(memo.ids))
    return make_shape("crit", cfg.models.resolve(call.role, call.phase), prompt, ANSWER_TOKENS["crit"].tokens(n), "crit",
                      getattr(cfg.max_tokens, call.phase), calib)


def _stage_shape(cfg: DebateConfig, call: Call, scenario: Scenario, memo: MemoInfo, answers: dict[str, float],
                 calib: Calibration | None) -> Shape:
    """The stage's system and template rendered with the universe, constraints, role, round and schema outline, the
    dynamic variables empty, + the memo (stages given ``memo``) or the desk's slice (``evidence``) + the answers of
    the stages it sees (``JSON_REDUMP``) + its other context (``CONTEXT_TOKENS``)."""
    n = len(scenario.tickers)
    prompts, compiled = load_prompts(cfg.protocol)
    spec_t = prompts.stages[call.kind]
    if call.schema is None:
        raise ValueError(f"stage {call.kind} of protocol {cfg.protocol} names no answer schema (a bug)")
    supplied = {"universe": ", ".join(scenario.tickers),
                "constraints": constraints_text(cfg.effective_constraints(scenario.constraints, "estimate")),
                "evidence": "", "role": call.role, "round": call.round, "schema": schema_outline(json_schema(call.schema)),
                "desk": call.desk, "stance": call.role.removeprefix("risk_")}
    user = compiled[call.kind].render(**{k: supplied.get(k, "") for k in spec_t.variables})
    prompt = text_tokens(spec_t.system, user) + sum(CONTEXT_TOKENS[c](n) for c in call.context)
    if "memo" in spec_t.variables:
        prompt += tokens_of(memo.chars)
    if "evidence" in spec_t.variables and call.desk:
        prompt += tokens_of(memo.slice_chars[call.desk])
    prompt += sum(answers[s] for s in call.sees) * JSON_REDUMP
    return make_shape(call.kind, cfg.models.resolve(call.role, call.phase), prompt, answers[call.kind], "stage",
                      getattr(cfg.max_tokens, call.phase), calib)


def stage_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, plan: Plan,
                 calib: Calibration | None = None) -> dict[Call, Shape]:
    """The shape of every call in a staged protocol's plan. CRIT (on the adversarial thesis) is shown the CRIT
    judge's prompt, not a stage's."""
    n = len(scenario.tickers)
    kinds = {k for step in plan.steps for call in step.calls for k in (call.kind, *call.sees)}
    answers = {s: STAGE_ANSWER_TOKENS.get(s, OTHER_STAGE_ANSWER).tokens(n) for s in {*STAGE_ANSWER_TOKENS, *kinds}}
    return {call: _crit_shape(cfg, call, memo, answers, n, calib) if call.kind == "crit"
            else _stage_shape(cfg, call, scenario, memo, answers, calib)
            for step in plan.steps for call in step.calls}
