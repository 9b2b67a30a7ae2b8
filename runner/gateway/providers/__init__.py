"""Provider registry: the part of a model string before the first '/' picks the provider.

``rules/…`` are the deterministic analysts (no LLM), ``local/…`` the embedded
offline model, and anything else goes to litellm. Adding a provider is one
module plus one entry in ``PROVIDERS``.
"""

from __future__ import annotations

from .base import Provider, RawResponse
from .litellm_provider import LiteLLMProvider
from .local import LocalModelProvider
from .rules import RulesProvider

PROVIDERS: dict[str, Provider] = {
    "rules": RulesProvider(),
    "local": LocalModelProvider(),
}
DEFAULT_PROVIDER: Provider = LiteLLMProvider()


def provider_for(model: str) -> Provider:
    prefix = model.split("/", 1)[0] if "/" in model else ""
    return PROVIDERS.get(prefix, DEFAULT_PROVIDER)


__all__ = ["PROVIDERS", "Provider", "RawResponse", "provider_for"]
