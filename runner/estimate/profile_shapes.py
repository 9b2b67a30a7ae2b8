"""The shapes of the calls whose prompts come from the role profiles (``configs/roles``): the paper protocol's
agent phases, CRIT, RCA and the judge (and a self-consistency sample, which is a proposal)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from madbench.data.scenario import Constraints, Scenario
from madbench.debate.config import DebateConfig
from madbench.debate.context import constraints_text
from madbench.debate.profiles import load_profile
from madbench.debate.protocols.plan import Call
from madbench.debate.request_schemas import request_schema
from madbench.debate.validation import TurnRules, schema_outline
from madbench.runner.estimate.assumptions import (
    ANSWER_TOKENS,
    CITED_EVIDENCE_ITEMS,
    CLAIMS_PER_ANSWER,
    JSON_REDUMP,
    NUDGE_TOKENS,
    RECEIVED_SHARE,
    TIER_SCALE,
    Calibration,
    tokens_of,
)
from madbench.runner.estimate.shapes import MemoInfo, Shape, id_list_extra, make_shape, text_tokens
from madbench.scoring.crit_judge import load_crit_prompt
from madbench.scoring.prompts import load_scorer_prompt
from madbench.scoring.rca_judge import RCA_VARIABLES
from madbench.scoring.rubric import load_rubric


def _claim_ids() -> set[str]:
    return {f"C{i}" for i in range(1, CLAIMS_PER_ANSWER + 1)}


@dataclass(frozen=True)
class PaperShapes:
    """The shapes of one paper-protocol run, by agent id, plus the judge."""
    propose: dict[str, Shape]
    critique: dict[str, Shape]          # critics only
    revise: dict[str, Shape]
    revise_nudged: dict[str, Shape]     # a re-revision with one more note (JS, CRIT-causal, RCA feedback)
    crit: dict[str, Shape]
    crit_proposal: dict[str, Shape]     # CRIT on a proposal alone (rounds: 0)
    rca: dict[str, Shape]
    judge: Shape | None

    def of(self, call: Call) -> Shape:
        """The shape of a planned call: its kind (and variant), by agent."""
        if call.kind == "judge":
            if self.judge is None:
                raise ValueError("a judge call in the plan of a run shaped without a judge (a bug)")
            return self.judge
        return getattr(self, call.kind + (f"_{call.variant}" if call.variant else ""))[call.agent]


@lru_cache(maxsize=1024)
def _outline(phase: str, universe: tuple[str, ...], constraints_json: str, ids: tuple[str, ...], peers: tuple[str, ...],
             owed: tuple[str, ...], require_known: bool) -> str:
    rules = TurnRules(list(universe), Constraints.model_validate_json(constraints_json), set(ids),
                      {p: _claim_ids() for p in peers}, require_known, [(o, "C1") for o in owed] if phase == "revise" else None)
    return schema_outline(request_schema(phase, rules))


@dataclass
class _PaperContext:
    """What every shape of one paper-protocol run shares."""
    cfg: DebateConfig
    universe: list[str]
    constraints: Any
    memo: MemoInfo
    calib: Calibration | None
    targets: dict[str, list[str]]
    senders: dict[str, list[str]]
    answer: dict[tuple[str, str], float]

    @property
    def memo_tokens(self) -> float:
        return tokens_of(self.memo.chars)

    def outline(self, phase: str, peers: tuple[str, ...] = (), owed: tuple[str, ...] = ()) -> str:
        """The schema outline the prompt shows (peers' claims and owed responses enumerated over C1..)."""
        return _outline(phase, tuple(self.universe), self.constraints.model_dump_json(), self.memo.ids, peers, owed,
                        self.cfg.require_known_evidence)

    def current(self, agent_id: str) -> float:
        """An agent's current output as a later prompt shows it: its proposal in round 1, its revision after,
        so over T rounds ``(propose + (T−1)·revise) / T``, re-serialised (``JSON_REDUMP``)."""
        t = max(self.cfg.rounds, 1)
        return (self.answer[agent_id, "propose"] + (t - 1) * self.answer[agent_id, "revise"]) / t * JSON_REDUMP

    def shape(self, kind: str, role: str, phase: str, prompt: float, answer: float) -> Shape:
        return make_shape(kind, self.cfg.models.resolve(role, phase), prompt, answer, kind,
                          getattr(self.cfg.max_tokens, phase), self.calib)


def _answers(cfg: DebateConfig, n: int, targets: dict[str, list[str]], senders: dict[str, list[str]]) -> dict:
    """Visible answer tokens per (agent, phase): ``ANSWER_TOKENS`` × ``TIER_SCALE``, capped by ``max_tokens``."""
    answer: dict[tuple[str, str], float] = {}
    for a in cfg.agents:
        scale = TIER_SCALE[a.tier]
        answer[a.agent_id, "propose"] = ANSWER_TOKENS["propose"].tokens(n) * scale
        answer[a.agent_id, "critique"] = ANSWER_TOKENS["critique"].tokens(n, len(targets[a.agent_id])) * scale
        answer[a.agent_id, "revise"] = ANSWER_TOKENS["revise"].tokens(n, len(senders[a.agent_id])) * scale
        for phase in ("propose", "critique", "revise"):
            cap = getattr(cfg.max_tokens, phase)
            if cap:
                answer[a.agent_id, phase] = min(answer[a.agent_id, phase], cap)
    return answer


def _agent_turn_shapes(x: _PaperContext, a) -> dict[str, Shape]:
    """propose, critique (critics only), revise and a nudged revise of one agent."""
    aid, role = a.agent_id, a.role
    profile = load_profile(role, a.tier)
    shared = {"memo": "", "universe": x.universe, "constraints": constraints_text(x.constraints)}
    head = profile.render_context(**shared)  # the system message; its memo is counted by memo_tokens
    common = {**shared, "agent_id": aid, "role": role, "round": 1}
    out = {}
    user = profile.user_prompt("propose", **common, schema=x.outline("propose"))
    out["propose"] = x.shape("propose", role, "propose", text_tokens(head, user) + x.memo_tokens,
                             x.answer[aid, "propose"])
    if x.targets[aid]:
        roles = {b.agent_id: b.role for b in x.cfg.agents}
        peers = [{"agent_id": t, "role": roles[t], "output": ""} for t in x.targets[aid]]
        user = profile.user_prompt("critique", **common, peers=peers, tone=profile.tone(x.cfg.pid.beta0),
                                   schema=x.outline("critique", peers=tuple(x.targets[aid])))
        context = sum(x.current(t) for t in x.targets[aid])
        out["critique"] = x.shape("critique", role, "critique", text_tokens(head, user) + x.memo_tokens + context,
                                  x.answer[aid, "critique"])
    senders = x.senders[aid]
    critiques = [{"from_agent": s, "target_claim": "C1", "objection_confidence": 0.5, "critique_text": "",
                  "suggested_adjustment": ""} for s in senders]
    user = profile.user_prompt("revise", **common, own="", critiques=critiques, nudges=[],
                               schema=x.outline("revise", owed=tuple(senders)))
    item = ANSWER_TOKENS["critique"].per_item
    base = (text_tokens(head, user) + x.memo_tokens + x.current(aid)
            + len(senders) * item * RECEIVED_SHARE["revise"])
    out["revise"] = x.shape("revise", role, "revise", base, x.answer[aid, "revise"])
    out["revise_nudged"] = x.shape("revise", role, "revise", base + NUDGE_TOKENS, x.answer[aid, "revise"])
    return out


def _agent_grading_shapes(x: _PaperContext, a) -> dict[str, Shape]:
    """CRIT on the revision (and on a proposal alone) and the RCA check of one agent."""
    aid, role = a.agent_id, a.role
    n = len(x.universe)
    crit_prompt, rca_prompt = load_crit_prompt(), load_scorer_prompt("rca", RCA_VARIABLES)
    pillars = {k: {"label": d.label, "description": d.description}
               for k, d in load_rubric(x.cfg.crit_rubric).for_role(role).items()}
    senders = x.senders[aid]
    shown = [{"from_agent": s, "target_claim": "C1", "critique_text": ""} for s in senders]
    item = ANSWER_TOKENS["critique"].per_item
    cited = CITED_EVIDENCE_ITEMS * tokens_of(x.memo.line_chars)
    cited += id_list_extra(x.memo.ids)
    revision = x.answer[aid, "revise"] * JSON_REDUMP
    crit_ans = ANSWER_TOKENS["crit"].tokens(n)
    user = crit_prompt.render(memo_ids=list(x.memo.ids), agent_id=aid, role=role, round=1, pillars=pillars,
                              before={"kind": "proposal", "text": ""}, argument="", evidence=[], critiques=shown)
    out = {"crit": x.shape("crit", role, "crit", text_tokens(crit_prompt.system, user) + x.current(aid) + revision + cited
                           + len(senders) * item * RECEIVED_SHARE["crit"], crit_ans)}
    user = crit_prompt.render(memo_ids=list(x.memo.ids), agent_id=aid, role=role, round=0, pillars=pillars, before=None,
                              argument="", evidence=[], critiques=[])
    out["crit_proposal"] = x.shape("crit", role, "crit", text_tokens(crit_prompt.system, user)
                                   + x.answer[aid, "propose"] * JSON_REDUMP + cited, crit_ans)
    user = rca_prompt.render(phase="revise", agent_id=aid, before="", after="", critiques=shown)
    out["rca"] = x.shape("rca", role, "rca", text_tokens(rca_prompt.system, user) + x.current(aid) + revision
                         + len(senders) * item * RECEIVED_SHARE["rca"], ANSWER_TOKENS["rca"].tokens(n))
    return out


def _judge_shape(x: _PaperContext) -> Shape:
    cfg = x.cfg
    jp = load_profile("judge", cfg.judge_tier)
    finals = [{"agent_id": a.agent_id, "role": a.role, "output": ""} for a in cfg.agents]
    shared = {"memo": "", "universe": x.universe, "constraints": constraints_text(x.constraints)}
    head = jp.render_context(**shared)  # the system message; its memo is counted by memo_tokens
    user = jp.user_prompt("judge", **shared, finals=finals, schema=x.outline("judge"), agent_id="judge", role="judge",
                          round=cfg.rounds)
    last = "revise" if cfg.rounds else "propose"
    context = sum(x.answer[a.agent_id, last] for a in cfg.agents) * JSON_REDUMP
    answer = ANSWER_TOKENS["judge"].tokens(len(x.universe)) * TIER_SCALE[cfg.judge_tier]
    return x.shape("judge", "judge", "judge", text_tokens(head, user) + x.memo_tokens + context, answer)


def paper_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, calib: Calibration | None = None) -> PaperShapes:
    """Prompt and completion tokens of every call the paper protocol makes (see the module docstring).

    Prompt = the rendered system and user prompt with dynamic parts empty + the memo (every agent phase and the
    judge) + the context: peers' current outputs (critique), its own output and the critiques received
    (revise), every final output (judge); CRIT and RCA get what was revised, the revision, the critiques'
    text, and CRIT also the memo lines of ``CITED_EVIDENCE_ITEMS`` cited items (``_PaperContext.current``
    for an agent's current output)."""
    targets = {a.agent_id: cfg.targets_of(a.agent_id) for a in cfg.agents}
    senders = {a.agent_id: [c.agent_id for c in cfg.agents if a.agent_id in targets[c.agent_id]] for a in cfg.agents}
    x = _PaperContext(cfg, list(scenario.tickers), cfg.effective_constraints(scenario.constraints, "estimate"), memo,
                      calib, targets, senders, _answers(cfg, len(scenario.tickers), targets, senders))
    out: dict[str, dict[str, Shape]] = {k: {} for k in ("propose", "critique", "revise", "revise_nudged", "crit",
                                                         "crit_proposal", "rca")}
    for a in cfg.agents:
        for kind, s in {**_agent_turn_shapes(x, a), **_agent_grading_shapes(x, a)}.items():
            out[kind][a.agent_id] = s
    return PaperShapes(judge=_judge_shape(x) if cfg.aggregation == "judge" else None, **out)
