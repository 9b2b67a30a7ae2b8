"""What a call costs: each call priced at its own model through the gateway's providers (litellm's offline cost
map for hosted models; ``rules/`` and ``local/`` models cost nothing, and ``rules/`` answers, which record no
tokens, count none). A model missing from the map is reported, never priced at 0."""

from __future__ import annotations

from functools import lru_cache

from madbench.gateway.models import ModelPrice, ModelSpec, spec_cost
from madbench.runner.wiring import build_providers


@lru_cache(maxsize=256)
def counts_tokens(model: str) -> bool:
    """Whether the model's calls record tokens: an LLM's do; a ``rules/`` answer's do not (its provider's ``is_llm``)."""
    return build_providers().for_model(model).is_llm


@lru_cache(maxsize=4096)
def price(model: str, prompt: int, completion: int, batch: bool = False, declared: ModelPrice | None = None) -> float | None:
    """US dollars of one call: at the ``declared`` price of its spec (a routing profile's ``price``), else from the
    gateway's provider for the model (None: not in the cost map, or listed at $0 for a hosted model); ``batch``: at
    batch-API prices (litellm's batch prices, or half the synchronous price where the map has none)."""
    spec = ModelSpec(model=model, price=declared)
    # None for a model outside the cost map; a model litellm cannot place raises (the preflight names it first).
    return spec_cost(build_providers().for_model(model), spec, prompt, completion, batch=batch)


def cost(e, field_name: str = "cost_usd") -> float | None:
    """A ``RunEstimate``'s cost, synchronously or (``cost_batch_usd``) at batch prices; None when a model has none."""
    return None if e.unpriced else sum(getattr(line, field_name) for line in e.lines.values())
