"""The LLM gateway: every model call in madbench goes through ``Gateway.complete``."""

from .accounting import Budget, Completion, Totals
from .cache import ResponseCache, resolve_cache_dir
from .errors import BudgetExhausted, GatewayFailure, OutputInvalid
from .gateway import Gateway
from .limiter import LimiterPool
from .models import ModelRouting, ModelSpec, RateLimits, RetryPolicy
from .request import LLMRequest, Message

__all__ = ["Budget", "BudgetExhausted", "Completion", "Gateway", "GatewayFailure", "LLMRequest", "LimiterPool",
           "Message", "ModelRouting", "ModelSpec", "OutputInvalid", "RateLimits", "ResponseCache", "RetryPolicy",
           "Totals", "resolve_cache_dir"]
