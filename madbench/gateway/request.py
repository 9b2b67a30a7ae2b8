"""One LLM request, and the cache key that identifies its answer.

The key is sha256 over canonical JSON (sorted keys, no whitespace) of exactly
the fields that change what a provider would answer. Keys, timeouts, retry
settings and concurrency are deliberately absent: changing them must not
invalidate a paid-for answer, and secrets must never be hashed into a name
that is stored on disk.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]

#: Bump when the meaning of a cached value changes, so old entries miss.
CACHE_SCHEMA_VERSION = 1


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Role
    content: str


class LLMRequest(BaseModel):
    """What to ask. ``model`` is a litellm model string or a registered prefix (``rules/…``, ``local/…``)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Message]
    api_base: str | None = None
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    response_schema: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    #: Replicate number: equal prompts with different indices are distinct, reproducible samples.
    sample_index: int = 0
    #: Structured inputs for non-LLM providers (the rule-based analysts). Never sent over HTTP
    #: and not part of the key: the messages are rendered from the same inputs.
    context: dict[str, Any] | None = Field(default=None, exclude=True)

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"

    def key_fields(self) -> dict[str, Any]:
        return {
            "v": CACHE_SCHEMA_VERSION,
            "provider": self.provider,
            "model": self.model,
            "api_base": self.api_base,
            "messages": [m.model_dump() for m in self.messages],
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "response_schema": self.response_schema,
            "tools": self.tools,
            "sample_index": self.sample_index,
        }

    def cache_key(self) -> str:
        return sha256_json(self.key_fields())

    def messages_hash(self) -> str:
        return sha256_json([m.model_dump() for m in self.messages])


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace (RFC 8785 in spirit)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
