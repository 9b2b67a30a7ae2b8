"""Provider registry: the part of a model string before the first '/' picks the provider.

``local/…`` is the embedded offline model and anything unnamed goes to litellm. The registry is an object
(``Providers``), built by whoever composes the system and handed to each ``Gateway``: providers that need knowledge
the gateway does not have (``rules/…``, the deterministic analysts) and provider batch mode are chosen there
(``madbench.runner.wiring``), never installed into this module. Adding a provider is one module plus one entry.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..models import ModelSpec, SchemaScope
from .base import Provider, RawResponse
from .litellm_provider import LiteLLMProvider
from .local import LocalModelProvider


class Providers:
    """Which provider answers each model: ``named`` by prefix, anything else ``default``. Immutable once built."""

    def __init__(self, named: Mapping[str, Provider], default: Provider):
        self._named = dict(named)
        self.default = default

    @classmethod
    def declared(cls) -> Providers:
        """The providers the gateway itself ships: ``local/…`` and litellm for everything else."""
        return cls({"local": LocalModelProvider()}, LiteLLMProvider())

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(sorted(self._named))

    def with_named(self, prefix: str, provider: Provider) -> Providers:
        """A registry that also routes ``<prefix>/…`` model strings to ``provider`` (replacing any earlier one)."""
        return Providers({**self._named, prefix: provider}, self.default)

    def with_default(self, provider: Provider) -> Providers:
        """A registry whose unnamed models (litellm's) go to ``provider`` instead."""
        return Providers(self._named, provider)

    def for_model(self, model: str) -> Provider:
        prefix = model.split("/", 1)[0] if "/" in model else ""
        return self._named.get(prefix, self.default)

    def schema_scope(self, spec: ModelSpec) -> SchemaScope:
        """How narrowly the schema sent to ``spec`` is fitted: its own setting, else its provider's default; "turn"
        when no schema is sent at all (``prompt_only``: the turn's own outline travels in the prompt, there is nothing
        to share)."""
        provider = self.for_model(spec.model)
        prepared = provider.prepare(spec)
        if prepared.structured_output == "prompt_only":
            return "turn"
        if prepared.schema_scope is None:  # Provider.prepare fills in its default
            raise TypeError(f"{type(provider).__name__}.prepare left schema_scope unset for {spec.model}")
        return prepared.schema_scope


__all__ = ["Provider", "Providers", "RawResponse"]
