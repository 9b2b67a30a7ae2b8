"""What an estimate assumes: answer lengths, token and latency models, how often the optional calls happen, and
what a pilot batch puts in their place (``Calibration``).

Every number here is an assumption unless a pilot replaces it (``--calibrate-from RESULTS``): the constants are
named and documented so that a reader can see, and change, what an estimate rests on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
#: A stage madbench does not ship (a researcher's own protocol): about the median shipped stage, with an allocation's
#: tokens per ticker; a pilot of the protocol measures it.
OTHER_STAGE_ANSWER = Size(250, 12)


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

#: Context a stage's prompt shows besides the memo and earlier answers (``Call.context``), in tokens for ``n``
#: tickers: a proposed allocation shown as JSON is about 12 tokens a ticker; the reflection line a sentence or three.
CONTEXT_TOKENS = {"book": lambda n: 12.0 * n, "reflection": lambda n: 60.0}


def speed_of(model: str) -> Speed:
    for pattern, speed in SPEEDS:
        if pattern in model:
            return speed
    return DEFAULT_SPEED


@dataclass(frozen=True)
class Rates:
    """How often the optional calls happen. Probabilities are per opportunity; see ``runner.estimate.counting``."""
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


def tokens_of(chars: float) -> float:
    """Tokens of a text of ``chars`` characters: ``chars / CHARS_PER_TOKEN``."""
    return chars / CHARS_PER_TOKEN


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
