"""Call shapes: for every kind of call a run makes, who answers it (``config.models.resolve(role, phase)``), its prompt
tokens, its completion tokens and its latency, one attempt.

Prompt tokens are the real prompt, rendered with this scenario's universe, constraints and schema outline, with the
dynamic parts left empty and counted instead: the scenario's real memo (``MemoInfo``) plus the context the call is
shown, sized from the declared answer lengths (``assumptions``). Completion tokens are a declared answer length
plus hidden reasoning tokens for reasoning models (``REASONING_TOKENS``), capped by the config's ``max_tokens``, or
those corrected by a pilot batch (``Calibration``). Where the prompts come from is the plan's ``prompts``: the role
profiles (``profile_shapes``) or the protocol's stage prompts (``stage_shapes``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from madbench.debate.protocols.staged import SLICES, memo_slice, render_items, slice_of
from madbench.gateway.models import ModelSpec
from madbench.gateway.providers.litellm_provider import import_litellm
from madbench.runner.estimate.assumptions import (
    ID_LIST_CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    REASONING_TOKENS,
    Calibration,
    Factors,
    speed_of,
    tokens_of,
)

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


def text_tokens(*texts: str) -> float:
    return tokens_of(sum(len(t) for t in texts)) + 2 * MESSAGE_OVERHEAD_TOKENS


def id_list_extra(ids: tuple[str, ...]) -> float:
    """Tokens the ID list in a CRIT prompt takes beyond ``tokens_of`` its characters (``ID_LIST_CHARS_PER_TOKEN``)."""
    chars = len(", ".join(ids))
    return chars / ID_LIST_CHARS_PER_TOKEN - tokens_of(chars)
