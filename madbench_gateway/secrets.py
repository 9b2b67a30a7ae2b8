"""Keep credentials out of everything madbench writes.

Keys are read from the environment at call time and passed straight to the
provider client. Anything recorded from a provider (error messages echo
request details) passes through ``redact`` first.
"""

from __future__ import annotations

import os
import re

from .errors import FatalProviderError

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(sk|pk|rk|gsk|xai|key)-[A-Za-z0-9_\-]{6,}")


def secret_values() -> list[str]:
    return sorted((v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6),
                  key=len, reverse=True)


def redact(text: str) -> str:
    for value in secret_values():
        text = text.replace(value, "***")
    return _KEY_SHAPES.sub(lambda m: m.group(1) + "-***", text)


def api_key_from_env(var: str | None) -> str | None:
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise FatalProviderError(f"environment variable {var} is not set (it must hold the API key for this model)")
    return value
