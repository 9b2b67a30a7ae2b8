"""Gateway outcomes other than a validated answer.

Provider errors are classified once, here, so the retry logic reads as a
table: rate limits go to the limiter, transient errors back off, fatal errors
stop, and invalid answers are returned to the model as feedback.
"""

from __future__ import annotations

import asyncio
from typing import Any


class ProviderError(Exception):
    kind = "provider_error"

    def __init__(self, reason: str, billed: dict[str, Any] | None = None):
        super().__init__(reason)
        self.reason = reason
        #: What the provider billed for this failed attempt (``prompt_tokens``, ``completion_tokens``, ``cost_usd``,
        #: as on an ``Attempt``): a refused or truncated answer is paid for, so it is accounted like one.
        self.billed = billed or {}


class RateLimited(ProviderError):
    kind = "rate_limited"

    def __init__(self, reason: str, retry_after: float | None):
        super().__init__(reason)
        self.retry_after = retry_after


class TransientError(ProviderError):
    """Timeouts, 5xx, dropped connections, malformed provider bodies."""

    kind = "transient"


class NoAnswer(TransientError):
    """A timeout or a dropped connection: no answer came, though the provider may have billed the request. A call
    cancelled with its request at the provider counts one at its reserved maximum, never at nothing."""


class Overloaded(TransientError):
    """A server error that says when to come back (Anthropic's 529 ``overloaded_error`` with ``retry-after``): retried
    after that wait (capped at the model's ``retry_after_cap_s``), and counted with the transient errors."""

    def __init__(self, reason: str, retry_after: float):
        super().__init__(reason)
        self.retry_after = retry_after


class FatalProviderError(ProviderError):
    """Bad credentials, bad requests, unknown models: retrying cannot help."""

    kind = "fatal"


class Refused(FatalProviderError):
    """The model declined to answer: OpenAI's ``refusal``, Anthropic's ``stop_reason: refusal``, a Gemini safety block
    (``finishReason: SAFETY`` and its kin, or a blocked prompt). Never parsed as an answer, and not retried: the same
    prompt is refused again far more often than not, and each refusal is billed."""

    kind = "refused"


class Truncated(FatalProviderError):
    """The answer hit its token budget (``finish_reason: length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``).
    Recorded as such, with what it billed, and not retried: the same budget truncates again, and a larger one would
    change the request the run declared (raise the phase's ``max_tokens`` in the config instead)."""

    kind = "truncated"


class OutputInvalid(Exception):
    """The answer arrived but fails the schema or the domain checks; the message is the feedback."""


class BudgetExhausted(Exception):
    """The batch's max_cost_usd was reached; no new paid calls start."""


class DriverGone(BaseException):
    """The driver this work was for has gone (killed, or replaced by another): stop at once, call and write nothing.

    A ``BaseException`` like ``KeyboardInterrupt``, so that no ``except Exception`` on the way up records it
    as a failed call or a failed run: there is no failure to record, only a stop."""


class CallCancelled(asyncio.CancelledError):
    """A call cancelled on the way (a sibling turn failed and its run stopped). Still a cancellation for asyncio;
    carries the call's attempts, so that what it may have been billed reaches the run's trace as the budget counted
    it (a request at the provider at the cancel: its reserved maximum, see ``Gateway._reserved``)."""

    def __init__(self, attempts: list[dict[str, Any]]):
        super().__init__("cancelled")
        self.attempts = attempts


class GatewayFailure(Exception):
    """A request that ended without a valid answer. Carries every attempt for the trace."""

    def __init__(self, reason: str, attempts: list[dict[str, Any]]):
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
