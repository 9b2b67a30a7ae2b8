"""Gateway outcomes other than a validated answer.

Provider errors are classified once, here, so the retry logic reads as a
table: rate limits go to the limiter, transient errors back off, fatal errors
stop, and invalid answers are returned to the model as feedback.
"""

from __future__ import annotations

from typing import Any


class ProviderError(Exception):
    kind = "provider_error"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RateLimited(ProviderError):
    kind = "rate_limited"

    def __init__(self, reason: str, retry_after: float | None):
        super().__init__(reason)
        self.retry_after = retry_after


class TransientError(ProviderError):
    """Timeouts, 5xx, dropped connections, malformed provider bodies."""

    kind = "transient"


class FatalProviderError(ProviderError):
    """Bad credentials, bad requests, unknown models: retrying cannot help."""

    kind = "fatal"


class OutputInvalid(Exception):
    """The answer arrived but fails the schema or the domain checks; the message is the feedback."""


class BudgetExhausted(Exception):
    """The batch's max_cost_usd was reached; no new paid calls start."""


class GatewayFailure(Exception):
    """A request that ended without a valid answer. Carries every attempt for the trace."""

    def __init__(self, reason: str, attempts: list[dict[str, Any]]):
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
