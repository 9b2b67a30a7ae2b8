"""Calls, tokens, cost and wall time of a batch before it runs (``madbench run BATCH --dry-run``).

The estimate follows each protocol's real phase structure, one run at a time, in two steps:

1. **Call shapes** (``paper_shapes``, ``staged_steps``): for every kind of call a run makes (a phase of the
   paper protocol, a stage of a staged one), who answers it (``config.models.resolve(role, phase)``), its prompt
   tokens and its completion tokens. Prompt tokens are the real prompt, rendered from the role profile or stage
   template with this scenario's universe, constraints and schema outline, with the dynamic parts left empty
   and counted instead: the scenario's real memo (``MemoInfo``) plus the context the call is shown (peers'
   proposals, critiques received, earlier stages' answers), sized from the declared answer lengths below.
   Completion tokens are a declared answer length (``ANSWER_TOKENS``, ``STAGE_ANSWER_TOKENS``) plus hidden
   reasoning tokens for reasoning models (``REASONING_TOKENS``), capped by the config's ``max_tokens``, or
   those corrected by a pilot batch (``Calibration``).
2. **The plan** (``paper_plan``, ``staged_plan``): how many times each shape is called and the critical path,
   from the protocol's control flow, under ``Rates`` (intervention firing probabilities, validation retries,
   early stop). ``EXPECTED_RATES`` are declared below; ``worst_rates`` makes every intervention fire to its
   configured ``max_retries`` in every round. Both are pure formulas, documented where they are computed.

Cost prices each call at its own model with the gateway's providers (litellm's offline cost map for hosted
models; ``rules/`` and ``local/`` models cost nothing, and ``rules/`` answers, which record no tokens, count none); a model missing from the map is reported, never priced
at 0, and the cost of any config that uses it is None. Wall time is one run's critical path (phases
sequential, agents within a phase concurrent), and for a batch the slowest of that and each model's rate
limits (``batch_wall_s``).

Every number here is an assumption unless a pilot replaces it (``--calibrate-from RESULTS``): the constants are
named and documented so that a reader can see, and change, what an estimate rests on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from madbench.data.errors import InputError
from madbench.data.scenario import Constraints, Scenario
from madbench.debate.config import DebateConfig
from madbench.debate.context import constraints_text
from madbench.debate.interventions import configured
from madbench.debate.profiles import load_profile
from madbench.debate.protocols import protocol_options
from madbench.debate.protocols.staged import SLICES, load_prompts, memo_slice, render_items, slice_of
from madbench.debate.request_schemas import request_schema
from madbench.debate.stage_schemas import (
    Argument,
    Attack,
    CIOVerdict,
    DebateMap,
    DeskReport,
    FactBase,
    PMDecision,
    Rebuttal,
    RiskScorecard,
    RiskView,
    Ruling,
    Synthesis,
    Thesis,
    TradePlan,
)
from madbench.debate.trace import read_trace
from madbench.debate.validation import TurnRules, schema_outline
from madbench.gateway.models import ModelSpec, RateLimits
from madbench.gateway.providers.litellm_provider import import_litellm
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.wiring import build_providers
from madbench.scoring.crit_judge import load_crit_prompt
from madbench.scoring.prompts import load_scorer_prompt
from madbench.scoring.rca_judge import RCA_VARIABLES
from madbench.scoring.rubric import load_rubric

# ================================================================================================
# Declared constants (each an assumption; a pilot batch replaces the ones it can measure)
# ================================================================================================

#: Characters per token. Measured with o200k_base (the gpt-4o/gpt-5 tokenizer) on the 35 paper scenarios'
#: memos: 4.02 (3.69-4.18 per memo); whole rendered agent prompts: 3.6-3.9 (the propose prompt of an enriched
#: agent on a 7-ticker paper scenario is estimated within 2% of its o200k count).
CHARS_PER_TOKEN = 4.0
#: The comma-separated list of memo evidence IDs that CRIT is shown is denser: 2.7 characters a token (o200k).
ID_LIST_CHARS_PER_TOKEN = 2.7
#: Tokens added by the chat format per message (role markers), two messages a call.
MESSAGE_OVERHEAD_TOKENS = 8
#: An answer shown to a later call is re-serialised with ``model_dump_json(indent=1)``; the indentation and
#: newlines add about this share to what the model wrote.
JSON_REDUMP = 1.15
#: Claims a proposal carries (critique targets and owed responses are enumerated over them in the schema).
CLAIMS_PER_ANSWER = 6
#: What a revision, CRIT and RCA are shown of one critique received, as a share of the critique item's tokens
#: (the revise prompt shows its text and suggested adjustment; CRIT and RCA only its text).
RECEIVED_SHARE = {"revise": 0.6, "crit": 0.4, "rca": 0.4}
#: Distinct memo items an argument cites: CRIT is shown their memo lines.
CITED_EVIDENCE_ITEMS = 15
#: A moderator's note (a JS or CRIT-causal nudge, RCA feedback) added to a retried revision's prompt.
NUDGE_TOKENS = 80
#: A validation retry re-sends the prompt with the rejected answer and this much error feedback.
VALIDATION_FEEDBACK_TOKENS = 100


@dataclass(frozen=True)
class Size:
    """Visible answer tokens: ``base + per_ticker·n_tickers + per_item·items`` (items: critique targets for a
    critique, critiques received for a revision)."""
    base: float
    per_ticker: float = 0.0
    per_item: float = 0.0

    def tokens(self, n_tickers: int, items: int = 0) -> float:
        return self.base + self.per_ticker * n_tickers + self.per_item * items


#: Visible answer tokens of the paper's phases, for the enriched tier (``TIER_SCALE`` for the others), from the
#: output schemas (``madbench.debate.schemas``): a claim (text, type, evidence IDs, assumptions, falsifiers, impacts,
#: confidence, keys) is about 150 tokens and a proposal carries about six; an allocation entry and a position
#: rationale about 30 per ticker; a critique item (text, evidence, implication, adjustment, falsifier) about
#: 220; a critique response about 90.
ANSWER_TOKENS: dict[str, Size] = {
    "propose": Size(1000, 30),
    "critique": Size(40, 0, 220),
    "revise": Size(1080, 30, 90),
    "judge": Size(350, 15),
    "crit": Size(350),
    "rca": Size(120),
}
#: Answer length by prompt tier (basic asks for less structure, enriched for the most).
TIER_SCALE = {"basic": 0.6, "causal": 0.8, "enriched": 1.0}
#: Hidden reasoning tokens per call of a reasoning model (litellm's ``supports_reasoning``, e.g. gpt-5,
#: gpt-5-mini, o3, gemini-2.5): billed as completion tokens and generated before the answer. Assumed for the
#: default (medium) effort on prompts of this size; a pilot measures them.
REASONING_TOKENS: dict[str, float] = {"propose": 2000, "critique": 1500, "revise": 2000, "judge": 2500,
                                      "crit": 2000, "rca": 800, "stage": 1200}

#: Visible answer tokens of the staged protocols' stages, from ``madbench.debate.stage_schemas``.
STAGE_ANSWER_TOKENS: dict[str, Size] = {
    "planner": Size(700), "bull_thesis": Size(450, 12), "bear_attack": Size(250), "bull_rebuttal": Size(300, 12),
    "bear_changes": Size(250), "risk_auditor": Size(250), "cio": Size(200, 12),
    "desk": Size(280, 15), "analyst": Size(280, 15), "bull": Size(380), "bear": Size(380), "debate_map": Size(350),
    "research_manager": Size(350), "synthesiser": Size(100, 20), "trader": Size(150, 12), "risk": Size(250),
    "portfolio_manager": Size(150, 12),
}


@dataclass(frozen=True)
class Speed:
    """Latency of one call: ``overhead_s + prompt_tokens / prefill_tps + completion_tokens / decode_tps``
    (reasoning tokens are generated at the decode rate before the first visible token)."""
    overhead_s: float
    prefill_tps: float
    decode_tps: float

    def latency(self, prompt_tokens: float, completion_tokens: float) -> float:
        return self.overhead_s + prompt_tokens / self.prefill_tps + completion_tokens / self.decode_tps


#: Declared speeds, first match on the model string. Rough public throughput of the hosted models (not
#: measured here: a pilot's latencies replace them); the rule-based answers take milliseconds.
SPEEDS: tuple[tuple[str, Speed], ...] = (
    ("rules/", Speed(0.005, 1e9, 1e9)),
    ("local/", Speed(0.5, 2000.0, 30.0)),
    ("gpt-5-nano", Speed(1.0, 20000.0, 150.0)),
    ("gpt-5-mini", Speed(1.5, 20000.0, 80.0)),
    ("gpt-5", Speed(2.0, 10000.0, 50.0)),
    ("gpt-4o-mini", Speed(0.6, 20000.0, 80.0)),
    ("gpt-4o", Speed(0.6, 20000.0, 90.0)),
    ("o3", Speed(2.0, 10000.0, 60.0)),
    ("o4-mini", Speed(1.5, 20000.0, 100.0)),
    ("gemini-2.5-flash", Speed(0.8, 30000.0, 180.0)),
    ("gemini-2.5-pro", Speed(2.0, 20000.0, 80.0)),
    ("claude", Speed(1.0, 10000.0, 60.0)),
)
DEFAULT_SPEED = Speed(1.0, 10000.0, 60.0)
#: Coefficient of variation of one call's latency: concurrent calls of a phase wait for the slowest.
LATENCY_CV = 0.3
#: Ray start and runner actors (each imports litellm once, about 5 s, in parallel).
BATCH_STARTUP_S = 10.0


def speed_of(model: str) -> Speed:
    for pattern, speed in SPEEDS:
        if pattern in model:
            return speed
    return DEFAULT_SPEED


@dataclass(frozen=True)
class Rates:
    """How often the optional calls happen. Probabilities are per opportunity; see ``paper_plan``."""
    #: P(the RCA judge finds one revision inconsistent), per check.
    rca_fail: float = 0.0
    #: P(JS collapse fires after a round's revisions), and P(it still fires after a re-revision).
    js_fire: float = 0.0
    js_refire: float = 0.0
    #: P(an agent's P4 < the CRIT-causal threshold), and P(still below after a re-revision).
    cc_fire: float = 0.0
    cc_refire: float = 0.0
    #: Expected validation retries per call (an answer that fails the schema or domain checks, re-asked).
    validation_retries: float = 0.0
    #: Expected rounds run / rounds configured (the PID controller may stop early).
    rounds_fraction: float = 1.0


#: The expected case, declared from the paper: causal alignment (P4) is the weakest pillar at 0.65-0.81 with
#: causal overreach flagged in most rounds (§3.4; so most agents fall below the 0.8 threshold), sycophantic
#: convergence is the common failure (JS collapse), and reasoning-allocation disconnects and ignored critiques
#: occurred in 10 and 7 of 17 runs (RCA). Validation failures (a hallucinated ticker, a bad sum) are rare with
#: schema-constrained decoding. Early stop is not counted on (rounds_fraction 1).
EXPECTED_RATES = Rates(rca_fail=0.3, js_fire=0.5, js_refire=0.5, cc_fire=0.6, cc_refire=0.5,
                       validation_retries=0.05, rounds_fraction=1.0)
NO_FIRING = Rates()


def worst_rates(rates: Rates) -> Rates:
    """Every intervention fires at every opportunity up to its ``max_retries``, every round runs; validation
    retries stay at the expected rate (a provider that fails every answer to the limit is an outage, not a cost)."""
    return Rates(rca_fail=1.0, js_fire=1.0, js_refire=1.0, cc_fire=1.0, cc_refire=1.0,
                 validation_retries=rates.validation_retries, rounds_fraction=1.0)


# ================================================================================================
# Pure formulas
# ================================================================================================

def tokens_of(chars: float) -> float:
    """Tokens of a text of ``chars`` characters: ``chars / CHARS_PER_TOKEN``."""
    return chars / CHARS_PER_TOKEN


def expected_retries(p: float, limit: int) -> float:
    """Expected retries when each try fails with probability ``p`` and at most ``limit`` retries follow:
    ``E[r] = Σ_{k=1..limit} P(r ≥ k) = Σ_{k=1..limit} p^k``."""
    return sum(p ** k for k in range(1, limit + 1))


def expected_max_retries(p: float, limit: int, n: int) -> float:
    """Expected largest retry count among ``n`` independent chains (each as ``expected_retries``):
    ``E[max r] = Σ_{k=1..limit} P(max ≥ k) = Σ_k 1 − (1 − p^k)^n``."""
    return sum(1 - (1 - p ** k) ** n for k in range(1, limit + 1)) if n > 0 else 0.0


def expected_attempts(p_fire: float, p_again: float, limit: int) -> float:
    """Expected re-runs of an intervention that fires with ``p_fire`` and, after each re-run, fires again with
    ``p_again``, up to ``limit`` re-runs: ``p_fire · Σ_{k=0..limit−1} p_again^k``."""
    return p_fire * sum(p_again ** k for k in range(limit))


#: E[max of k standard normals], k = 1..10 (order-statistic tables).
_MAX_NORMAL = (0.0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236, 1.4850, 1.5388)


def straggler_factor(k: int, cv: float) -> float:
    """Expected slowest of ``k`` concurrent calls relative to one: ``1 + cv · E[max of k standard normals]``
    (k > 10: ``sqrt(2 ln k)``)."""
    if k <= 1:
        return 1.0
    e = _MAX_NORMAL[k - 1] if k <= len(_MAX_NORMAL) else math.sqrt(2 * math.log(k))
    return 1.0 + cv * e


def batch_wall_s(path_s: list[float], max_in_flight: int, usage: dict[str, LimitUsage]) -> tuple[float, str]:
    """Wall time of a batch and its bottleneck: ``BATCH_STARTUP_S + max(latency bound, each model's limit bound)``.

    * latency bound: runs overlap up to ``C = min(max_in_flight, runs)`` at a time (each runner actor takes up to
      ``max_in_flight`` concurrent runs, so ``workers`` does not cap it): ``max(Σ path / C, max path)``;
    * per rate-limit key (provider, model, api_base), with ``h`` the limits' headroom:
      ``attempts / (rpm·(1−h)/60)``, ``tokens / (tpm·(1−h)/60)`` and ``busy seconds / max_concurrency``.

    429 back-off, provider outages and cache hits are not modelled."""
    if not path_s:
        return 0.0, "nothing to run"
    c = max(1, min(max_in_flight, len(path_s)))
    bounds = {"latency (critical path of the runs in flight)": max(sum(path_s) / c, max(path_s))}
    for key, u in usage.items():
        lim, keep, name = u.limits, 1 - u.limits.headroom, u.label or key
        if lim.rpm:
            bounds[f"rpm of {name}"] = u.attempts / (lim.rpm * keep / 60)
        if lim.tpm:
            bounds[f"tpm of {name}"] = u.tokens / (lim.tpm * keep / 60)
        bounds[f"max_concurrency of {name}"] = u.busy_s / lim.max_concurrency
    name = max(bounds, key=bounds.get)
    return BATCH_STARTUP_S + bounds[name], name


# ================================================================================================
# The memo, the call shapes
# ================================================================================================

_ID_LINE = re.compile(r"^\s*\[([A-Za-z0-9_.\-]+)\]")


@dataclass(frozen=True)
class MemoInfo:
    """What the estimate needs of a scenario's memo: its size, its evidence IDs and the size of each desk's slice."""
    chars: int
    ids: tuple[str, ...]
    #: Characters of each non-empty desk slice as the desks are shown it.
    slice_chars: dict[str, int]
    #: Mean characters of one evidence line (CRIT is shown the lines an argument cites).
    line_chars: float

    @classmethod
    def from_memo(cls, memo) -> MemoInfo:
        items = memo.items
        slices = {s: len(render_items(memo_slice(items, s))) for s in SLICES if memo_slice(items, s)}
        lines = render_items(items).splitlines()
        return cls(len(memo.text), tuple(sorted(memo.evidence_ids)), slices,
                   sum(map(len, lines)) / len(lines) if lines else 0.0)

    @classmethod
    def from_text(cls, text: str, ids: Iterable[str]) -> MemoInfo:
        """From a trace's ``memo`` event (its text and IDs): each slice's size from the memo lines of its IDs."""
        slices: dict[str, int] = {}
        lines = []
        for line in text.splitlines():
            m = _ID_LINE.match(line)
            if m:
                lines.append(len(line))
                s = slice_of(m.group(1))
                slices[s] = slices.get(s, 0) + len(line) + 1
        return cls(len(text), tuple(sorted(ids)), slices, sum(lines) / len(lines) if lines else 0.0)


@dataclass(frozen=True)
class Shape:
    """One kind of call: who answers it and its tokens (one attempt) and latency (one attempt)."""
    kind: str                # calibration key: a paper phase (propose, critique, revise, crit, rca, judge) or a stage
    spec: ModelSpec
    prompt: float            # prompt tokens
    answer: float            # visible answer tokens
    completion: float        # billed completion tokens (answer + reasoning, capped by max_tokens)
    latency_s: float

    @property
    def model(self) -> str:
        return self.spec.model


@dataclass(frozen=True)
class Factors:
    """A pilot's correction of one (model, kind): observed ÷ estimated, per call."""
    prompt: float = 1.0
    completion: float = 1.0
    latency: float = 1.0


@dataclass
class Calibration:
    """What a pilot batch measured: the rates, and per (model, kind) the factors that bring the shapes to what it saw."""
    source: str
    rates: Rates
    rate_sources: dict[str, str]
    factors: dict[tuple[str, str], Factors]
    latency_cv: float
    #: Observed per (model, kind): calls, mean prompt and completion tokens, mean latency.
    observed: list[dict[str, Any]]
    runs: int

    def factor(self, model: str, kind: str) -> Factors:
        """(model, kind), else that model's pooled factors, else that kind's over every model, else none."""
        for key in ((model, kind), (model, "*"), ("*", kind)):
            if key in self.factors:
                return self.factors[key]
        return Factors()


@lru_cache(maxsize=256)
def is_reasoning(model: str) -> bool:
    """Whether litellm's model map says the model reasons before it answers (False when it does not know it)."""
    if model.startswith(("rules/", "local/")):
        return False
    return bool(import_litellm().supports_reasoning(model=model))  # False for a model litellm does not know


def make_shape(kind: str, spec: ModelSpec, prompt: float, answer: float, reasoning_key: str, max_tokens: int | None,
               calib: Calibration | None) -> Shape:
    """A call's shape: completion = min(answer + reasoning, max_tokens), then the pilot's factors if any."""
    reasoning = REASONING_TOKENS[reasoning_key] if is_reasoning(spec.model) else 0.0
    completion = answer + reasoning
    if max_tokens:
        completion, answer = min(completion, max_tokens), min(answer, max_tokens)
    f = calib.factor(spec.model, kind) if calib else Factors()
    prompt, completion = prompt * f.prompt, completion * f.completion
    latency = speed_of(spec.model).latency(prompt, completion) * f.latency
    return Shape(kind, spec, prompt, answer, completion, latency)


def _text_tokens(*texts: str) -> float:
    return tokens_of(sum(len(t) for t in texts)) + 2 * MESSAGE_OVERHEAD_TOKENS


def _id_list_extra(ids: tuple[str, ...]) -> float:
    """Tokens the ID list in a CRIT prompt takes beyond ``tokens_of`` its characters (``ID_LIST_CHARS_PER_TOKEN``)."""
    chars = len(", ".join(ids))
    return chars / ID_LIST_CHARS_PER_TOKEN - tokens_of(chars)


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
    out["propose"] = x.shape("propose", role, "propose", _text_tokens(head, user) + x.memo_tokens,
                             x.answer[aid, "propose"])
    if x.targets[aid]:
        roles = {b.agent_id: b.role for b in x.cfg.agents}
        peers = [{"agent_id": t, "role": roles[t], "output": ""} for t in x.targets[aid]]
        user = profile.user_prompt("critique", **common, peers=peers, tone=profile.tone(x.cfg.pid.beta0),
                                   schema=x.outline("critique", peers=tuple(x.targets[aid])))
        context = sum(x.current(t) for t in x.targets[aid])
        out["critique"] = x.shape("critique", role, "critique", _text_tokens(head, user) + x.memo_tokens + context,
                                  x.answer[aid, "critique"])
    senders = x.senders[aid]
    critiques = [{"from_agent": s, "target_claim": "C1", "objection_confidence": 0.5, "critique_text": "",
                  "suggested_adjustment": ""} for s in senders]
    user = profile.user_prompt("revise", **common, own="", critiques=critiques, nudges=[],
                               schema=x.outline("revise", owed=tuple(senders)))
    item = ANSWER_TOKENS["critique"].per_item
    base = (_text_tokens(head, user) + x.memo_tokens + x.current(aid)
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
    cited += _id_list_extra(x.memo.ids)
    revision = x.answer[aid, "revise"] * JSON_REDUMP
    crit_ans = ANSWER_TOKENS["crit"].tokens(n)
    user = crit_prompt.render(memo_ids=list(x.memo.ids), agent_id=aid, role=role, round=1, pillars=pillars,
                              before={"kind": "proposal", "text": ""}, argument="", evidence=[], critiques=shown)
    out = {"crit": x.shape("crit", role, "crit", _text_tokens(crit_prompt.system, user) + x.current(aid) + revision + cited
                           + len(senders) * item * RECEIVED_SHARE["crit"], crit_ans)}
    user = crit_prompt.render(memo_ids=list(x.memo.ids), agent_id=aid, role=role, round=0, pillars=pillars, before=None,
                              argument="", evidence=[], critiques=[])
    out["crit_proposal"] = x.shape("crit", role, "crit", _text_tokens(crit_prompt.system, user)
                                   + x.answer[aid, "propose"] * JSON_REDUMP + cited, crit_ans)
    user = rca_prompt.render(phase="revise", agent_id=aid, before="", after="", critiques=shown)
    out["rca"] = x.shape("rca", role, "rca", _text_tokens(rca_prompt.system, user) + x.current(aid) + revision
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
    return x.shape("judge", "judge", "judge", _text_tokens(head, user) + x.memo_tokens + context, answer)


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


# ================================================================================================
# Counting: the plan of one run
# ================================================================================================

@dataclass
class Line:
    """Totals of one (model, kind) in a run or a batch."""
    calls: float = 0.0
    attempts: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    busy_s: float = 0.0
    cost_usd: float = 0.0
    #: The same calls at the provider's batch-API prices (``execution: batch``).
    cost_batch_usd: float = 0.0


@dataclass
class LimitUsage:
    """What a batch asks of one rate-limit key: HTTP attempts, tokens, and seconds of calls in flight; ``label``
    names the key for a reader (the model, and its api_base if any; the key itself is ``provider|model|api_base``)."""
    limits: RateLimits
    attempts: float = 0.0
    tokens: float = 0.0
    busy_s: float = 0.0
    label: str = ""


def limit_label(spec: ModelSpec) -> str:
    """A rate-limit key as the dry run prints it: ``rules/macro``, ``openai/x at http://host/v1``."""
    return spec.model + (f" at {spec.api_base}" if spec.api_base else "")


@dataclass
class RunEstimate:
    """One run: calls (logical calls, one ``llm_call`` event each), HTTP attempts (with validation retries),
    tokens, cost (None when a model has no price), and its critical path in seconds."""
    calls: float = 0.0
    attempts: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    cost_usd: float | None = 0.0
    path_s: float = 0.0
    lines: dict[tuple[str, str], Line] = field(default_factory=dict)
    limits: dict[str, LimitUsage] = field(default_factory=dict)
    unpriced: set[str] = field(default_factory=set)


@lru_cache(maxsize=256)
def counts_tokens(model: str) -> bool:
    """Whether the model's calls record tokens: an LLM's do; a ``rules/`` answer's do not (its provider's ``is_llm``)."""
    return build_providers().for_model(model).is_llm


@lru_cache(maxsize=4096)
def _price(model: str, prompt: int, completion: int, batch: bool = False) -> float | None:
    """US dollars of one call from the gateway's provider for the model (None: not in the cost map); ``batch``: at
    its batch-API prices (litellm's batch prices, or half the synchronous price where the map has none)."""
    # None for a model outside the cost map; a model litellm cannot place raises (the preflight names it first).
    return build_providers().for_model(model).cost(model, prompt, completion, batch=batch)


class Tally:
    """Accumulates calls into a ``RunEstimate``; ``v`` is the expected validation retries per call.

    A call with ``v`` expected retries makes ``1 + v`` attempts; each retry re-sends the prompt with the rejected
    answer and ``VALIDATION_FEEDBACK_TOKENS``, so its prompt tokens are ``p + v·(p + answer + feedback)``, its
    completion tokens ``(1 + v)·c`` and its latency ``(1 + v)·L``."""

    def __init__(self, v: float, cv: float = LATENCY_CV):
        self.v, self.cv = v, cv
        self.est = RunEstimate()

    def latency(self, s: Shape) -> float:
        return (1 + self.v) * s.latency_s

    def calls(self, s: Shape, n: float) -> None:
        if n <= 0:
            return
        v, e = self.v, self.est
        # A rule-based answer (a provider that is no LLM) records no tokens, so none are counted: the shape keeps
        # the prompt a model would be sent, the tally what the run's calls will record.
        llm = counts_tokens(s.model)
        prompt = s.prompt + v * (s.prompt + s.answer + VALIDATION_FEEDBACK_TOKENS) if llm else 0.0
        completion = (1 + v) * s.completion if llm else 0.0
        line = e.lines.setdefault((s.model, s.kind), Line())
        line.calls += n
        line.attempts += n * (1 + v)
        line.prompt_tokens += n * prompt
        line.completion_tokens += n * completion
        line.busy_s += n * self.latency(s)
        e.calls += n
        e.attempts += n * (1 + v)
        e.prompt_tokens += n * prompt
        e.completion_tokens += n * completion
        price = _price(s.model, round(prompt), round(completion))
        if price is None:
            e.unpriced.add(s.model)
        else:
            line.cost_usd += n * price
            line.cost_batch_usd += n * _price(s.model, round(prompt), round(completion), batch=True)
        u = e.limits.setdefault(s.spec.limit_key(), LimitUsage(s.spec.limits, label=limit_label(s.spec)))
        u.attempts += n * (1 + v)
        u.tokens += n * (prompt + completion)
        u.busy_s += n * self.latency(s)

    def step(self, shapes: list[Shape], times: float = 1.0) -> None:
        """``times`` occurrences of one concurrent step on the critical path: the slowest of its calls
        (``max L · straggler_factor(k)``), in ``ceil(k_m / max_concurrency_m)`` waves when a model's concurrency
        cap is below its share ``k_m`` of the step."""
        if not shapes or times <= 0:
            return
        per_model: dict[str, int] = {}
        for s in shapes:
            per_model[s.spec.limit_key()] = per_model.get(s.spec.limit_key(), 0) + 1
        waves = max(math.ceil(k / next(s.spec.limits.max_concurrency for s in shapes if s.spec.limit_key() == key))
                    for key, k in per_model.items())
        slowest = max(self.latency(s) for s in shapes)
        self.est.path_s += times * waves * slowest * straggler_factor(len(shapes), self.cv)

    def finish(self) -> RunEstimate:
        e = self.est
        e.cost_usd = None if e.unpriced else sum(line.cost_usd for line in e.lines.values())
        return e


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class _Expect:
    """The expected optional calls of one paper run (see ``paper_plan``)."""
    rounds: float      # E[T]
    rca: bool
    er: float          # RCA retries per revision
    er_max: float      # the largest over the agents of one revise step
    ejs: float         # JS re-revision rounds per round
    ecc: float         # CRIT-causal re-revisions per agent per round


def _expect(cfg: DebateConfig, rates: Rates) -> _Expect:
    interventions = dict(configured(cfg.interventions))
    rca, js, cc = interventions.get("rca"), interventions.get("js_collapse"), interventions.get("crit_causal")
    n = len(cfg.agents)
    limit = rca.max_retries if rca else 0
    return _Expect(rounds=cfg.rounds * rates.rounds_fraction, rca=rca is not None,
                   er=expected_retries(rates.rca_fail, limit), er_max=expected_max_retries(rates.rca_fail, limit, n),
                   ejs=expected_attempts(rates.js_fire, rates.js_refire, js.max_retries) if js and n >= 2 else 0.0,
                   ecc=expected_attempts(rates.cc_fire, rates.cc_refire, cc.max_retries) if cc and cfg.score_rounds else 0.0)


def _revisions(tally: Tally, shapes: PaperShapes, group: dict[str, Shape], agents: list[str], x: _Expect,
               times: float) -> None:
    """``times`` revise steps of every agent: the revisions with their RCA checks and retries, counted, and on the
    critical path the revise step, the RCA step and ``er_max`` (revise + RCA) retry pairs."""
    for a in agents:
        tally.calls(group[a], times)
        if x.rca:
            tally.calls(shapes.revise_nudged[a], times * x.er)
            tally.calls(shapes.rca[a], times * (1 + x.er))
    tally.step([group[a] for a in agents], times)
    if x.rca:
        tally.step([shapes.rca[a] for a in agents], times)
        pair = max(tally.latency(shapes.revise_nudged[a]) + tally.latency(shapes.rca[a]) for a in agents)
        tally.est.path_s += times * x.er_max * pair


def _crit_causal(tally: Tally, shapes: PaperShapes, agents: list[str], x: _Expect) -> None:
    """CRIT-causal's re-revisions and re-scores, one agent after another (the hook loops over its targets)."""
    chains = []
    for a in agents:
        tally.calls(shapes.revise_nudged[a], x.rounds * x.ecc)
        tally.calls(shapes.crit[a], x.rounds * x.ecc)
        chain = tally.latency(shapes.revise_nudged[a]) + tally.latency(shapes.crit[a])
        if x.rca:
            tally.calls(shapes.revise_nudged[a], x.rounds * x.ecc * x.er)
            tally.calls(shapes.rca[a], x.rounds * x.ecc * (1 + x.er))
            chain += (1 + x.er) * tally.latency(shapes.rca[a]) + x.er * tally.latency(shapes.revise_nudged[a])
        chains.append(chain)
    tally.est.path_s += x.rounds * x.ecc * sum(chains)


def paper_plan(cfg: DebateConfig, shapes: PaperShapes, rates: Rates, cv: float = LATENCY_CV) -> RunEstimate:
    """Calls and critical path of one paper-protocol run (``madbench.debate.protocols.paper.PaperDebate``).

    With A agents, c critics (agents with critique targets), E[T] = rounds · rounds_fraction:

    * calls = A propose + [A CRIT on proposals if rounds = 0 and score_rounds]
      + E[T] · (c critique + A·u revise units + ejs·A·u + [A CRIT + A·ecc·(u + 1 CRIT)] if score_rounds)
      + [1 judge], where
    * a revise unit u is one revise call, and with RCA (max_retries R, fail probability f) also
      ``er = Σ_{k≤R} f^k`` retried revisions and ``1 + er`` RCA checks (RCA checks every revision, including
      the re-revisions JS collapse and CRIT-causal ask for);
    * JS collapse (two agents or more; max_retries M): ``ejs = js_fire · Σ_{k<M} js_refire^k`` re-revisions of
      every agent per round;
    * CRIT-causal (max_retries K): ``ecc = cc_fire · Σ_{k<K} cc_refire^k`` re-revisions and re-scores per agent
      per round.

    Critical path per round: critique step, revise step (+ the RCA step and ``E[max over agents of r]`` retry
    pairs), ejs more revise steps, the CRIT step, then CRIT-causal's re-revisions one agent after another
    (A·ecc · (revise + RCA chain + CRIT)); one propose step first and one judge step last."""
    tally = Tally(rates.validation_retries, cv)
    agents = [a.agent_id for a in cfg.agents]
    x = _expect(cfg, rates)
    for a in agents:
        tally.calls(shapes.propose[a], 1)
    tally.step([shapes.propose[a] for a in agents])
    if cfg.rounds == 0 and cfg.score_rounds:
        for a in agents:
            tally.calls(shapes.crit_proposal[a], 1)
        tally.step([shapes.crit_proposal[a] for a in agents])
    if x.rounds > 0:
        critics = [a for a in agents if a in shapes.critique]
        for a in critics:
            tally.calls(shapes.critique[a], x.rounds)
        tally.step([shapes.critique[a] for a in critics], x.rounds)
        _revisions(tally, shapes, shapes.revise, agents, x, x.rounds)
        if x.ejs:
            _revisions(tally, shapes, shapes.revise_nudged, agents, x, x.rounds * x.ejs)
        if cfg.score_rounds:
            for a in agents:
                tally.calls(shapes.crit[a], x.rounds)
            tally.step([shapes.crit[a] for a in agents], x.rounds)
            if x.ecc:
                _crit_causal(tally, shapes, agents, x)
    if shapes.judge is not None:
        tally.calls(shapes.judge, 1)
        tally.step([shapes.judge])
    return tally.finish()


# -- the staged protocols ------------------------------------------------------------------------

@dataclass(frozen=True)
class StageStep:
    """One step of a staged protocol: ``width`` concurrent calls of one stage (a list of shapes)."""
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class _Stage:
    stage: str              # its prompt in configs/protocols/<protocol>.yaml, and the calibration kind
    role: str               # routing role
    schema: type[BaseModel]
    sees: tuple[str, ...] = ()   # earlier stages whose answers its prompt shows (JSON), with repeats
    extra_tokens: float = 0.0    # other context (a proposed book: n·12 tokens, a reflection …), see below
    round: int = 0


def _stage_list(protocol: str, options: dict[str, Any], desks: list[str], n: int) -> list[list[_Stage]]:
    """The stages of a staged protocol as steps of concurrent stages, mirroring its ``run``:

    * adversarial: planner → bull_thesis → (CRIT on the thesis) → bear_attack → bull_rebuttal → [bear_changes]
      → risk_auditor → cio, one after another;
    * desks: the desks with evidence in their slice, concurrently → bull, bear per round (each seeing every
      argument so far) → debate_map → [research_manager] → synthesiser;
    * tradingagents: the analysts concurrently → bull, bear per round → trader → three risk stances
      concurrently → portfolio_manager.

    A desk whose slice of the memo is empty answers without a call (``record_local``), so only ``desks`` count."""
    cfg_opts = protocol_options(DebateConfig(name="x", protocol=protocol, options=options))
    book = 12.0 * n  # a proposed allocation shown as JSON: about 12 tokens a ticker
    if protocol == "adversarial":
        steps = [[_Stage("planner", "planner", FactBase)], [_Stage("bull_thesis", "bull", Thesis, ("planner",))],
                 [_Stage("crit", "bull", Thesis, ("bull_thesis",))],
                 [_Stage("bear_attack", "bear", Attack, ("planner", "bull_thesis"))],
                 [_Stage("bull_rebuttal", "bull", Rebuttal, ("bull_thesis", "bear_attack"))]]
        if cfg_opts.extra_bear_round:
            steps.append([_Stage("bear_changes", "bear", Attack, ("bull_thesis", "bull_rebuttal"), round=2)])
        debate = ("bull_thesis", "bear_attack", "bull_rebuttal") + (("bear_changes",) if cfg_opts.extra_bear_round else ())
        steps += [[_Stage("risk_auditor", "risk_auditor", RiskScorecard, extra_tokens=book)],
                  [_Stage("cio", "cio", CIOVerdict, debate + ("risk_auditor",))]]
        return steps
    if protocol not in ("desks", "tradingagents"):
        raise ValueError(f"runner/estimate.py has no stage model for protocol {protocol!r}: add it to _stage_list")
    first = "desk" if protocol == "desks" else "analyst"
    steps = [[_Stage(first, f"desk_{d}", DeskReport) for d in desks]]
    reports = (first,) * len(desks)
    history: tuple[str, ...] = ()
    for r in range(1, cfg_opts.debate_rounds + 1):
        for side in ("bull", "bear"):
            steps.append([_Stage(side, side, Argument, reports + history, round=r)])
            history += (side,)
    if protocol == "desks":
        steps.append([_Stage("debate_map", "moderator", DebateMap, reports + history)])
        ruling: tuple[str, ...] = ()
        if cfg_opts.enable_research_manager:
            steps.append([_Stage("research_manager", "research_manager", Ruling, reports + history + ("debate_map",))])
            ruling = ("research_manager",)
        steps.append([_Stage("synthesiser", "synthesiser", Synthesis, reports + ("debate_map",) + ruling)])
        return steps
    reflection = 60.0  # the reflection line: a sentence or three
    steps.append([_Stage("trader", "trader", TradePlan, reports + history, extra_tokens=reflection)])
    steps.append([_Stage("risk", f"risk_{s}", RiskView, reports, extra_tokens=book)
                  for s in ("aggressive", "neutral", "conservative")])
    steps.append([_Stage("portfolio_manager", "portfolio_manager", PMDecision, ("trader",) + ("risk",) * 3,
                         extra_tokens=reflection)])
    return steps


def staged_steps(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, calib: Calibration | None = None) -> list[StageStep]:
    """Shapes of a staged protocol's calls, step by step. Prompt = the stage's system and template rendered with
    the universe, constraints, role, round and schema outline, the dynamic variables empty, + the memo (stages
    given ``memo``) or the desk's slice (``evidence``) + the answers of the stages it sees (``JSON_REDUMP``) +
    ``extra_tokens``. CRIT on the adversarial thesis is sized like the paper's CRIT on a proposal."""
    n = len(scenario.tickers)
    universe = list(scenario.tickers)
    constraints = constraints_text(cfg.effective_constraints(scenario.constraints, "estimate"))
    desks = [d for d in SLICES if d in memo.slice_chars]
    plan = _stage_list(cfg.protocol, cfg.options, desks, n)
    prompts, compiled = load_prompts(cfg.protocol)
    answers = {s: size.tokens(n) for s, size in STAGE_ANSWER_TOKENS.items()}
    mt = cfg.max_tokens.propose  # every stage is routed as the propose phase
    out = []
    for step in plan:
        shapes = []
        for i, st in enumerate(step):
            if st.stage == "crit":
                crit_prompt = load_crit_prompt()
                rubric = load_rubric(cfg.crit_rubric)
                pillars = {k: {"label": d.label, "description": d.description} for k, d in rubric.for_role(st.role).items()}
                user = crit_prompt.render(memo_ids=list(memo.ids), agent_id=st.role, role=st.role, round=1, pillars=pillars,
                                          before=None, argument="", evidence=[], critiques=[])
                prompt = (_text_tokens(crit_prompt.system, user) + answers["bull_thesis"] * JSON_REDUMP
                          + CITED_EVIDENCE_ITEMS * tokens_of(memo.line_chars) + _id_list_extra(memo.ids))
                shapes.append(make_shape("crit", cfg.models.resolve(st.role, "crit"), prompt, ANSWER_TOKENS["crit"].tokens(n),
                                         "crit", cfg.max_tokens.crit, calib))
                continue
            spec_t = prompts.stages[st.stage]
            desk = desks[i] if st.stage in ("desk", "analyst") else ""
            supplied = {"universe": ", ".join(universe), "constraints": constraints, "evidence": "", "role": st.role,
                        "round": st.round, "schema": schema_outline(st.schema.model_json_schema()), "desk": desk,
                        "stance": st.role.removeprefix("risk_")}
            user = compiled[st.stage].render(**{k: supplied.get(k, "") for k in spec_t.variables})
            prompt = _text_tokens(spec_t.system, user) + st.extra_tokens
            if "memo" in spec_t.variables:
                prompt += tokens_of(memo.chars)
            if "evidence" in spec_t.variables and desk:
                prompt += tokens_of(memo.slice_chars[desk])
            prompt += sum(answers[s] for s in st.sees) * JSON_REDUMP
            shapes.append(make_shape(st.stage, cfg.models.resolve(st.role, "propose"), prompt, answers[st.stage], "stage",
                                     mt, calib))
        if shapes:
            out.append(StageStep(tuple(shapes)))
    return out


def staged_plan(steps: list[StageStep], rates: Rates, cv: float = LATENCY_CV) -> RunEstimate:
    """Calls = one per stage call (``Σ widths``); the critical path is the sum of each step's slowest call.
    Staged protocols have no interventions: only validation retries apply."""
    tally = Tally(rates.validation_retries, cv)
    for step in steps:
        for s in step.shapes:
            tally.calls(s, 1)
        tally.step(list(step.shapes))
    return tally.finish()


# ================================================================================================
# A run, a batch
# ================================================================================================

@dataclass(frozen=True)
class RunShapes:
    paper: PaperShapes | None = None
    staged: list[StageStep] | None = None


def self_consistency_plan(cfg: DebateConfig, shapes: PaperShapes, rates: Rates, cv: float = LATENCY_CV) -> RunEstimate:
    """``self_consistency``: N proposals of its one agent (the paper's propose shape), asked concurrently as one
    step; nothing else is called (``madbench.debate.protocols.self_consistency``)."""
    n = protocol_options(cfg).samples
    if n is None:
        raise ValueError(f"config {cfg.name}: match_tokens_of is unresolved (runner.batch.resolve_samples resolves it)")
    tally = Tally(rates.validation_retries, cv)
    propose = shapes.propose[cfg.agents[0].agent_id]
    tally.calls(propose, n)
    tally.step([propose] * n)
    return tally.finish()


def run_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, calib: Calibration | None = None) -> RunShapes:
    if cfg.protocol in ("paper", "self_consistency"):  # a self-consistency sample is the paper's proposal
        return RunShapes(paper=paper_shapes(cfg, scenario, memo, calib))
    return RunShapes(staged=staged_steps(cfg, scenario, memo, calib))


def estimate_run(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, rates: Rates, calib: Calibration | None = None,
                 shapes: RunShapes | None = None) -> RunEstimate:
    """One run of ``cfg`` on ``scenario`` under ``rates``."""
    shapes = shapes or run_shapes(cfg, scenario, memo, calib)
    cv = calib.latency_cv if calib else LATENCY_CV
    if cfg.protocol == "self_consistency":
        return self_consistency_plan(cfg, shapes.paper, rates, cv)
    if shapes.paper is not None:
        return paper_plan(cfg, shapes.paper, rates, cv)
    return staged_plan(shapes.staged or [], rates, cv)


def _merge(into: RunEstimate, e: RunEstimate) -> None:
    into.calls += e.calls
    into.attempts += e.attempts
    into.prompt_tokens += e.prompt_tokens
    into.completion_tokens += e.completion_tokens
    into.unpriced |= e.unpriced
    for k, line in e.lines.items():
        t = into.lines.setdefault(k, Line())
        for f in ("calls", "attempts", "prompt_tokens", "completion_tokens", "busy_s", "cost_usd", "cost_batch_usd"):
            setattr(t, f, getattr(t, f) + getattr(line, f))
    for k, u in e.limits.items():
        t2 = into.limits.setdefault(k, LimitUsage(u.limits, label=u.label))
        t2.attempts += u.attempts
        t2.tokens += u.tokens
        t2.busy_s += u.busy_s


def _cost(e: RunEstimate, field_name: str = "cost_usd") -> float | None:
    """The run's (or batch's) cost, synchronously or (``cost_batch_usd``) at batch prices; None when a model has none."""
    return None if e.unpriced else sum(getattr(line, field_name) for line in e.lines.values())


def estimate_batch(runs: list, memos: dict[str, MemoInfo], max_in_flight: int, calib: Calibration | None = None,
                   rates: Rates | None = None) -> dict[str, Any]:
    """Per config and for the whole batch: runs, calls, tokens, cost (expected and worst), minutes per scenario
    (one run's critical path, mean over the config's runs) and batch wall time (``batch_wall_s``).

    ``runs`` are ``madbench.runner.batch.RunSpec``s; ``memos`` maps scenario id → ``MemoInfo``."""
    rates = rates or (calib.rates if calib else EXPECTED_RATES)
    worst = worst_rates(rates)
    per_config: dict[str, dict[str, Any]] = {}
    total = {"expected": RunEstimate(), "worst": RunEstimate()}
    all_paths: list[float] = []
    cache: dict[tuple[str, str], tuple[RunEstimate, RunEstimate]] = {}
    for r in runs:
        key = (r.config.content_hash(), r.scenario.id)
        if key not in cache:
            memo = memos[r.scenario.id]
            shapes = run_shapes(r.config, r.scenario, memo, calib)
            cache[key] = (estimate_run(r.config, r.scenario, memo, rates, calib, shapes),
                          estimate_run(r.config, r.scenario, memo, worst, calib, shapes))
        exp, wst = cache[key]
        c = per_config.setdefault(r.config.name, {"runs": 0, "expected": RunEstimate(), "worst": RunEstimate(),
                                                  "paths": [], "worst_paths": []})
        c["runs"] += 1
        _merge(c["expected"], exp)
        _merge(c["worst"], wst)
        c["paths"].append(exp.path_s)
        c["worst_paths"].append(wst.path_s)
        _merge(total["expected"], exp)
        _merge(total["worst"], wst)
        all_paths.append(exp.path_s)
    out_configs = []
    for name, c in per_config.items():
        wall, bottleneck = batch_wall_s(c["paths"], max_in_flight, c["expected"].limits)
        out_configs.append({"config": name, "runs": c["runs"], **_summary(c["expected"], c["worst"], c["runs"]),
                            "minutes_per_scenario": round(_mean(c["paths"]) / 60, 2),
                            "minutes_per_scenario_worst": round(_mean(c["worst_paths"]) / 60, 2),
                            "wall_s_alone": round(wall, 1), "bottleneck_alone": bottleneck})
    wall, bottleneck = batch_wall_s(all_paths, max_in_flight, total["expected"].limits)
    return {"configs": out_configs, "total": {"runs": len(runs), **_summary(total["expected"], total["worst"], len(runs))},
            "batch_wall_s": round(wall, 1), "bottleneck": bottleneck,
            "models_without_price": sorted(total["expected"].unpriced | total["worst"].unpriced),
            "by_model": _by_model(total["expected"]), "rates": rates.__dict__, "worst_rates": worst.__dict__}


def _summary(exp: RunEstimate, worst: RunEstimate, runs: int) -> dict[str, Any]:
    ce, cw, cb, cbw = _cost(exp), _cost(worst), _cost(exp, "cost_batch_usd"), _cost(worst, "cost_batch_usd")
    return {"calls": round(exp.calls, 1), "calls_worst": round(worst.calls, 1), "attempts": round(exp.attempts, 1),
            "prompt_tokens": round(exp.prompt_tokens), "completion_tokens": round(exp.completion_tokens),
            "prompt_tokens_worst": round(worst.prompt_tokens), "completion_tokens_worst": round(worst.completion_tokens),
            "cost_usd": None if ce is None else round(ce, 4), "cost_usd_worst": None if cw is None else round(cw, 4),
            "cost_batch_usd": None if cb is None else round(cb, 4),
            "cost_batch_usd_worst": None if cbw is None else round(cbw, 4),
            "cost_per_scenario_usd": None if ce is None or not runs else round(ce / runs, 4),
            "cost_known_part_usd": round(sum(line.cost_usd for line in exp.lines.values()), 4),
            "cost_known_part_usd_worst": round(sum(line.cost_usd for line in worst.lines.values()), 4),
            "models_without_price": sorted(exp.unpriced | worst.unpriced)}


def _by_model(e: RunEstimate) -> list[dict[str, Any]]:
    rows = []
    for (model, kind), line in sorted(e.lines.items()):
        rows.append({"model": model, "kind": kind, "calls": round(line.calls, 1),
                     "prompt_tokens": round(line.prompt_tokens), "completion_tokens": round(line.completion_tokens),
                     "cost_usd": None if model in e.unpriced else round(line.cost_usd, 4)})
    return rows


# -- the table the dry run prints ----------------------------------------------------------------

def _tokens(n) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def _money(cost, known: float) -> str:
    """A cost, or what is known of it when a model has no price (never shown as 0)."""
    if cost is not None:
        return f"{cost:.2f}"
    return f"≥{known:.2f}" if known > 0 else "n/a"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    m = s / 60
    return f"{m:.1f} min" if m < 120 else f"{int(m // 60)} h {int(m % 60):02d} min"


def usd(x: float) -> str:
    """Dollars to the cent, or to 1/100 of a cent below $1 (where cents would round a small batch's figures away)."""
    return f"${x:.2f}" if abs(x) >= 1 else f"${x:.4f}"


def batch_line(t: dict, execution: str) -> str:
    """The batch's expected cost synchronously and through provider batch APIs, side by side."""
    sync, batch = t["cost_usd"], t["cost_batch_usd"]
    now = ("this batch runs in provider batch mode (execution: batch): its cost is the provider batch one, and its wall "
           "time is each phase's batch turnaround (up to the provider's 24 h window) times the phases, not the above"
           if execution == "batch" else "`--provider-batch` or `execution: batch` runs it so; answers within hours instead "
           "of minutes")
    return (f"cost by execution: synchronous {usd(sync)}, provider batch {usd(batch)} (saves {usd(sync - batch)}, "
            f"{1 - batch / sync:.0%}); {now}. Both before prompt caching, which serves repeated prompt prefixes "
            "at a discount (`madbench bench cost` measures it)")


def _config_row(c: dict) -> str:
    n = c["runs"]
    known, worst_known = c["cost_known_part_usd"], c["cost_known_part_usd_worst"]
    return (f"{c['config'][:34]:<34} {n:>5} {c['calls'] / n:>7.1f} /{c['calls_worst'] / n:>6.1f} "
            f"{_tokens(c['prompt_tokens'] / n):>7} /{_tokens(c['completion_tokens'] / n):>6} "
            f"{_money(c['cost_per_scenario_usd'], known / n):>7} /{_money(None if c['cost_usd_worst'] is None else c['cost_usd_worst'] / n, worst_known / n):>6} "
            f"{_money(c['cost_usd'], known):>9} /{_money(c['cost_usd_worst'], worst_known):>8} "
            f"{c['minutes_per_scenario']:>6.1f} /{c['minutes_per_scenario_worst']:>5.1f} {_duration(c['wall_s_alone']):>11}")


def format_table(d: dict) -> str:
    """The dry run's estimate (``madbench.runner.cli.run.dry_run``) as a table: per config (per scenario and in all), then
    the batch, each model, and the rates used."""
    lines: list[str] = []
    out = lines.append
    cal = d["calibration"]
    src = (f"the pilot batch {cal['source']} ({cal['runs']} runs)" if cal else
           "the declared defaults of runner/estimate.py (--calibrate-from RESULTS: from a pilot batch)")
    out(f"batch {d['batch']}: {d['runs']} runs, max_in_flight {d['max_in_flight']}; estimated from {src}")
    out(f"{'':<34} {'':>5} {'calls/scenario':>14} {'tokens/scenario':>14} {'$/scenario':>14} {'$ in all':>18} "
        f"{'min/scenario':>12} {'wall':>11}")
    head = (f"{'config':<34} {'runs':>5} {'exp':>7} /{'worst':>6} {'in':>7} /{'out':>6} {'exp':>7} /{'worst':>6} "
            f"{'exp':>9} /{'worst':>8} {'exp':>6} /{'worst':>5} {'(alone)':>11}")
    out(head)
    out("-" * len(head))
    for c in d["configs"]:
        out(_config_row(c))
    out("-" * len(head))
    t = d["total"]
    worst_known = t["cost_known_part_usd_worst"]
    out(f"batch: {t['runs']} runs, {t['calls']:.0f} calls (worst {t['calls_worst']:.0f}; {t['attempts']:.0f} HTTP attempts "
        f"with validation retries), {_tokens(t['prompt_tokens'])} tokens in / {_tokens(t['completion_tokens'])} out, "
        f"${_money(t['cost_usd'], t['cost_known_part_usd'])} (worst ${_money(t['cost_usd_worst'], worst_known)}); "
        f"wall time {_duration(d['batch_wall_s'])}, bound by {d['bottleneck']}")
    if t["cost_usd"]:
        out(batch_line(t, d["execution"]))
    models: dict[str, list] = {}
    for row in d["by_model"]:
        m = models.setdefault(row["model"], [0.0, 0.0, 0.0, 0.0, True])
        m[0] += row["calls"]
        m[1] += row["prompt_tokens"]
        m[2] += row["completion_tokens"]
        if row["cost_usd"] is None:
            m[4] = False
        else:
            m[3] += row["cost_usd"]
    for model, (n, p, c, cost, known) in models.items():
        out(f"  {model:<32} {n:>9.0f} calls {_tokens(p):>8} in {_tokens(c):>8} out  "
            + (f"${cost:.2f}" if known else "no price in litellm's cost map: not costed"))
    out("expected case: " + ", ".join(f"{k} {v:.2f}" for k, v in d["rates"].items())
        + "; worst case: every intervention fires to its max_retries in every round, no early stop")
    if cal:
        out("rates from: " + "; ".join(f"{k} {v}" for k, v in cal["rate_sources"].items()))
    if d["models_without_price"]:
        out(f"no price for {', '.join(d['models_without_price'])}: costs that include them show what is known (≥) or n/a")
    return "\n".join(lines)


# ================================================================================================
# Calibration from a pilot batch
# ================================================================================================

_RCA_RETRY = re.compile(r":rca(\d+)$")


def _label_parts(label: str) -> list[str]:
    return str(label).split(":")


def kind_of(phase: str, label: str) -> str:
    """The calibration kind of a ``calls.parquet`` row: the paper's phase, or a staged protocol's stage
    (its label's first part: ``risk:aggressive`` → ``risk``)."""
    return phase if phase in ("propose", "critique", "revise", "judge", "crit", "rca") and \
        _label_parts(label)[0] in ("propose", "critique", "revise", "judge", "crit", "rca") else _label_parts(label)[0]


def observed_rates(runs: list[dict[str, Any]], calls_by_run: dict[str, list[dict[str, Any]]]) -> tuple[Rates, dict[str, str]]:
    """Rates a pilot observed (each ``fails / opportunities``), with where each came from.

    * RCA: per revision, checks at levels 1..R are opportunities and a retried revision (label ``…:rca<k>``) a
      failure; a revision retried R times had its last check outside the loop, so
      ``rca_fail = retries / (rca calls − revisions retried R times)``;
    * JS collapse: ``js_fire = rounds with a revise:js1 / rounds checked`` (paper runs with two agents or more),
      ``js_refire = rounds with js<k+1> / rounds with js<k>`` (k < max_retries);
    * CRIT-causal: the same per (round, agent) with ``revise:crit_causal<k>``, out of rounds × agents;
    * validation: mean ``validation_retries`` per call; early stop: mean ``rounds_run / rounds``.

    ``runs`` are dicts with ``run_id``, ``config`` (a ``DebateConfig``), ``rounds_run``; a rate with no
    opportunity in the pilot keeps its ``EXPECTED_RATES`` value (source ``default``)."""
    acc = {k: [0.0, 0.0] for k in ("rca_fail", "js_fire", "js_refire", "cc_fire", "cc_refire", "validation_retries",
                                   "rounds_fraction")}
    for run in runs:
        cfg: DebateConfig = run["config"]
        rows = calls_by_run.get(run["run_id"], [])
        for row in rows:
            acc["validation_retries"][0] += float(row.get("validation_retries") or 0)
            acc["validation_retries"][1] += 1
        if cfg.protocol != "paper":
            continue
        t = int(run.get("rounds_run") or 0)
        if cfg.rounds:
            acc["rounds_fraction"][0] += t
            acc["rounds_fraction"][1] += cfg.rounds
        iv = dict(configured(cfg.interventions))
        revise = [r for r in rows if r["phase"] == "revise"]
        if "rca" in iv:
            R = iv["rca"].max_retries
            retries = [r for r in revise if _RCA_RETRY.search(str(r["label"]))]
            at_limit = sum(1 for r in retries if int(_RCA_RETRY.search(str(r["label"])).group(1)) == R)
            acc["rca_fail"][0] += len(retries)
            acc["rca_fail"][1] += sum(1 for r in rows if r["phase"] == "rca") - at_limit
        for name, prefix, per_agent, fire, refire in (("js_collapse", "js", False, "js_fire", "js_refire"),
                                                      ("crit_causal", "crit_causal", True, "cc_fire", "cc_refire")):
            if name not in iv or (name == "js_collapse" and len(cfg.agents) < 2) or \
                    (name == "crit_causal" and not cfg.score_rounds):
                continue
            attempts: dict[int, set] = {}
            for r in revise:
                parts = _label_parts(r["label"])
                m = re.fullmatch(prefix + r"(\d+)", parts[1]) if len(parts) > 1 else None
                if m:
                    attempts.setdefault(int(m.group(1)), set()).add((r["round"], r["agent"]) if per_agent else r["round"])
            acc[fire][0] += len(attempts.get(1, ()))
            acc[fire][1] += t * (len(cfg.agents) if per_agent else 1)
            for k in range(1, iv[name].max_retries):
                acc[refire][0] += len(attempts.get(k + 1, ()))
                acc[refire][1] += len(attempts.get(k, ()))
    values, sources = {}, {}
    for k, (num, den) in acc.items():
        if den > 0:
            values[k] = num / den
            sources[k] = f"pilot ({num:g}/{den:g})"
        else:
            values[k] = getattr(EXPECTED_RATES, k)
            sources[k] = "default (no opportunity in the pilot)"
    return Rates(**values), sources


def read_pilot(results_dir: str | Path) -> tuple[list[dict[str, Any]], list[tuple], list[dict[str, Any]]]:
    """A pilot batch's finished runs: (runs as ``observed_rates`` takes them, (config, scenario, memo) per run from
    its trace's ``run_start`` and ``memo`` events, the rows of ``calls.parquet`` for those runs)."""
    layout = BatchDirs(results_dir)
    if not layout.table("calls").is_file() or not layout.table("runs").is_file():
        raise InputError(results_dir, "no calls.parquet and runs.parquet here",
                         "give a finished pilot batch's results directory, e.g. results/pilot")
    results = ResultsDir(results_dir)
    runs_df = results.runs
    ok = runs_df[runs_df["status"] == "ok"]
    runs, contexts = [], []
    for row in ok.itertuples():
        path = layout.trace_path(row.run_id)
        events = read_trace(path).events if path.exists() else []
        start = next((e for e in events if e["event"] == "run_start"), None)
        memo_ev = next((e for e in events if e["event"] == "memo"), None)
        if start is None or memo_ev is None or not memo_ev.get("text"):
            continue
        cfg = DebateConfig.model_validate(start["config"])
        runs.append({"run_id": row.run_id, "config": cfg, "rounds_run": row.rounds_run})
        contexts.append((cfg, Scenario.model_validate(start["scenario"]), MemoInfo.from_text(memo_ev["text"], memo_ev["ids"])))
    if not runs:
        raise InputError(results_dir, "no finished run with a trace here", "run a pilot batch first")
    calls_df = results.calls
    calls_df = calls_df[calls_df["run_id"].isin({r["run_id"] for r in runs})]
    return runs, contexts, calls_df.to_dict("records")


def _sums(items: Iterable[tuple[tuple[str, str], float, float, float, float]]) -> dict[tuple[str, str], list[float]]:
    """Per key, then pooled per (model, "*") and ("*", kind): [calls, prompt, completion, latency] sums."""
    out: dict[tuple[str, str], list[float]] = {}
    for (model, kind), *values in items:
        for key in ((model, kind), (model, "*"), ("*", kind)):
            acc = out.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            for i, v in enumerate(values):
                acc[i] += v
    return out


def _factor(o: list[float], p: list[float], i: int) -> float:
    """Observed mean per call ÷ estimated mean per call (1 when either is missing or zero)."""
    if not (o[0] and p[0] and o[i] and p[i]):
        return 1.0
    return (o[i] / o[0]) / (p[i] / p[0])


def calibrate(results_dir: str | Path) -> Calibration:
    """Measure a pilot batch (``results/<batch>``): rates (``observed_rates``) and, per (model, kind), factors
    ``observed mean per call ÷ estimated mean per call`` for prompt tokens, completion tokens and latency, where
    the estimate is this module's own for the pilot's runs (config, scenario and memo from each run's trace)
    under the observed rates; factors are pooled per model and per kind too (``Calibration.factor``). The
    latency's coefficient of variation (per model, averaged) replaces ``LATENCY_CV``."""
    runs, contexts, records = read_pilot(results_dir)
    by_run: dict[str, list[dict]] = {}
    for rec in records:
        by_run.setdefault(rec["run_id"], []).append(rec)
    rates, sources = observed_rates(runs, by_run)
    estimated = [estimate_run(cfg, scenario, memo, rates) for cfg, scenario, memo in contexts]
    pred = _sums((key, line.calls, line.prompt_tokens, line.completion_tokens, line.busy_s)
                 for e in estimated for key, line in e.lines.items())
    obs = _sums(((rec["model_requested"], kind_of(rec["phase"], rec["label"])), 1.0, float(rec["prompt_tokens"] or 0),
                 float(rec["completion_tokens"] or 0), float(rec["latency_s"] or 0)) for rec in records)
    factors = {k: Factors(_factor(o, pred[k], 1), _factor(o, pred[k], 2), _factor(o, pred[k], 3))
               for k, o in obs.items() if k in pred}
    latencies: dict[str, list[float]] = {}
    for rec in records:
        latencies.setdefault(rec["model_requested"], []).append(float(rec["latency_s"] or 0))
    cvs = [math.sqrt(_mean((v - m) ** 2 for v in vs)) / m for vs in latencies.values()
           if len(vs) > 1 and (m := _mean(vs)) > 0]
    observed = [{"model": k[0], "kind": k[1], "calls": int(o[0]), "prompt_tokens_mean": round(o[1] / o[0], 1),
                 "completion_tokens_mean": round(o[2] / o[0], 1), "latency_s_mean": round(o[3] / o[0], 3),
                 "factors": {f: round(getattr(factors[k], f), 3) for f in ("prompt", "completion", "latency")}
                 if k in factors else None}
                for k, o in sorted(obs.items()) if "*" not in k]
    return Calibration(str(results_dir), rates, sources, factors, _mean(cvs) if cvs else LATENCY_CV, observed, len(runs))


__all__ = ["ANSWER_TOKENS", "CHARS_PER_TOKEN", "EXPECTED_RATES", "NO_FIRING", "REASONING_TOKENS", "SPEEDS",
           "STAGE_ANSWER_TOKENS", "Calibration", "MemoInfo", "Rates", "RunEstimate", "batch_wall_s", "calibrate",
           "estimate_batch", "estimate_run", "expected_attempts", "format_table", "expected_max_retries", "expected_retries",
           "kind_of", "observed_rates", "paper_plan", "paper_shapes", "self_consistency_plan", "staged_plan", "staged_steps",
           "straggler_factor", "worst_rates"]
