"""Provider registry: the part of a model string before the first '/' picks the provider.

``local/…`` is the embedded offline model and anything unregistered goes to litellm. Providers that
need knowledge the gateway does not have (``rules/…``, the deterministic analysts) are registered by
the layer that has it (``register_provider``). Adding a provider is one module plus one entry.
"""

from __future__ import annotations

from ..models import ModelSpec, SchemaScope
from .base import Provider, RawResponse
from .batching import BatchCollector, BatchingProvider
from .litellm_provider import LiteLLMProvider
from .local import LocalModelProvider

PROVIDERS: dict[str, Provider] = {
    "local": LocalModelProvider(),
}
DEFAULT_PROVIDER: Provider = LiteLLMProvider()


def register_provider(prefix: str, provider: Provider) -> None:
    """Route ``<prefix>/…`` model strings to ``provider`` (registering again replaces the earlier one)."""
    PROVIDERS[prefix] = provider


def use_provider_batches(collector: BatchCollector) -> Provider:
    """From now on, in this process, answer every litellm-routed model through provider batches gathered by
    ``collector`` (providers/batching.py); returns the provider installed. A runner actor in batch mode calls it."""
    global DEFAULT_PROVIDER
    DEFAULT_PROVIDER = BatchingProvider(LiteLLMProvider(), collector)
    return DEFAULT_PROVIDER


def provider_for(model: str) -> Provider:
    prefix = model.split("/", 1)[0] if "/" in model else ""
    return PROVIDERS.get(prefix, DEFAULT_PROVIDER)


def schema_scope(spec: ModelSpec) -> SchemaScope:
    """How narrowly the schema sent to ``spec`` is fitted: its own setting, else its provider's default; "turn" when no
    schema is sent at all (``prompt_only``: the turn's own outline travels in the prompt, there is nothing to share)."""
    provider = provider_for(spec.model)
    prepared = provider.prepare(spec)
    if prepared.structured_output == "prompt_only":
        return "turn"
    if prepared.schema_scope is None:  # Provider.prepare fills in its default
        raise TypeError(f"{type(provider).__name__}.prepare left schema_scope unset for {spec.model}")
    return prepared.schema_scope


__all__ = ["PROVIDERS", "Provider", "RawResponse", "provider_for", "register_provider", "schema_scope",
           "use_provider_batches"]
