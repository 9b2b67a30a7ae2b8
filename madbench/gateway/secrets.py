"""Keep credentials out of everything madbench writes.

Keys are read from the environment at call time and passed straight to the
provider client. Anything recorded from a provider (error messages echo
request details) passes through ``redact`` first.

``redact`` scrubs by value, whatever the variable holding a key is called:
every key the gateway reads (``api_key_from_env``, ``remember_env``, or one
handed to a provider) is remembered for the life of the process, and so is
the value of every environment variable whose name looks secret. Each is
scrubbed as written, URL-encoded and base64-encoded (at any alignment, so a
``user:key`` basic-auth header is caught too). Runner actors are other
processes: each remembers the keys it reads itself.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import threading
import urllib.parse

from .errors import FatalProviderError

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(sk|pk|rk|gsk|xai|key)-[A-Za-z0-9_\-]{6,}")
#: Shorter values are not remembered: scrubbing them would mangle ordinary text.
MIN_SECRET_LEN = 6
#: A base64 fragment shorter than this is too likely to occur by chance to scrub.
_MIN_ENCODED_LEN = 8

_KNOWN: set[str] = set()
_LOCK = threading.Lock()


def remember(value: str | None) -> None:
    """Scrub ``value`` from everything ``redact`` sees from now on, in this process."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _LOCK:
            _KNOWN.add(value)


def remember_env(var: str | None) -> str | None:
    """The value of ``var`` (None when unset or empty), remembered as a secret."""
    value = os.environ.get(var) if var else None
    remember(value)
    return value or None


def known_secrets() -> frozenset[str]:
    with _LOCK:
        return frozenset(_KNOWN)


def secret_values() -> list[str]:
    """Every value to scrub: keys read in this process and variables whose name looks secret, longest first."""
    named = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(named | known_secrets(), key=len, reverse=True)


def _base64_cores(value: bytes) -> set[str]:
    """The base64 characters that depend on ``value`` alone, at each of the three alignments in a longer string."""
    cores = set()
    for shift in range(3):
        total_bits = 8 * (shift + len(value))
        first = -(-8 * shift // 6)  # the first character with no bit of the prefix
        last = (total_bits - 6) // 6  # the last character with no bit of the suffix (or padding)
        for enc in (base64.b64encode(b"\0" * shift + value), base64.urlsafe_b64encode(b"\0" * shift + value)):
            core = enc.decode()[first:last + 1]
            if len(core) >= _MIN_ENCODED_LEN:
                cores.add(core)
    return cores


@functools.lru_cache(maxsize=256)
def encodings(value: str) -> frozenset[str]:
    """``value`` as written, URL-encoded and base64-encoded: the forms a provider might echo."""
    forms = {value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
    return frozenset(forms | _base64_cores(value.encode()))


def redact_known(text: str, named: bool = True) -> str:
    """Scrub only secret values (in every encoding), leaving everything else exactly as it was.

    ``named=False`` scrubs only the keys read in this process, not every variable whose name looks secret
    (for text that is not an error message, where such a value may be an ordinary word).
    """
    forms: set[str] = set()
    for value in (secret_values() if named else known_secrets()):
        forms |= encodings(value)
    for form in sorted(forms, key=len, reverse=True):
        if form in text:
            text = text.replace(form, "***")
    return text


def redact(text: str) -> str:
    """Scrub known secrets and anything shaped like an API key."""
    return _KEY_SHAPES.sub(lambda m: m.group(1) + "-***", redact_known(text))


def api_key_from_env(var: str | None) -> str | None:
    if var is None:
        return None
    value = remember_env(var)
    if not value:
        raise FatalProviderError(f"environment variable {var} is not set (it must hold the API key for this model)")
    return value
