"""Calls, tokens, cost and wall time of a batch before it runs (``madbench run BATCH --dry-run``).

The estimate follows each protocol's own call plan (``plan(...)`` beside its ``run``, through the protocol
registry), one run at a time, in two steps:

1. **Call shapes** (``shapes``, ``profile_shapes``, ``stage_shapes``): for every call the plan makes, who answers it,
   its prompt and completion tokens and its latency, from the declared ``assumptions`` or a pilot's ``calibration``;
2. **Counting** (``counting``): how many times each shape is called and the critical path, under ``Rates``
   (intervention firing probabilities, validation retries, early stop): ``EXPECTED_RATES`` as declared, and
   ``worst_rates``, where every intervention fires to its ``max_retries`` in every round.

``pricing`` prices each call at its own model; ``tally`` sums a run and gives a batch's wall time; ``batch_estimate`` sums a
batch per config; ``presentation`` prints it. Every number is an assumption unless a pilot replaces it
(``--calibrate-from RESULTS``).
"""

from madbench.runner.estimate.assumptions import (
    ANSWER_TOKENS,
    BATCH_STARTUP_S,
    CHARS_PER_TOKEN,
    EXPECTED_RATES,
    NO_FIRING,
    REASONING_TOKENS,
    SPEEDS,
    STAGE_ANSWER_TOKENS,
    Calibration,
    Rates,
    speed_of,
    tokens_of,
    worst_rates,
)
from madbench.runner.estimate.batch_estimate import estimate_batch
from madbench.runner.estimate.calibration import calibrate, kind_of, observed_rates
from madbench.runner.estimate.counting import (
    count_plan,
    estimate_run,
    expected_attempts,
    expected_max_retries,
    expected_retries,
    run_shapes,
    staged_steps,
)
from madbench.runner.estimate.presentation import batch_line, format_table, usd
from madbench.runner.estimate.profile_shapes import paper_shapes
from madbench.runner.estimate.shapes import MemoInfo
from madbench.runner.estimate.tally import LimitUsage, RunEstimate, batch_wall_s, limit_label, straggler_factor

__all__ = ["ANSWER_TOKENS", "BATCH_STARTUP_S", "CHARS_PER_TOKEN", "EXPECTED_RATES", "NO_FIRING", "REASONING_TOKENS",
           "SPEEDS", "STAGE_ANSWER_TOKENS", "Calibration", "LimitUsage", "MemoInfo", "Rates", "RunEstimate",
           "batch_line", "batch_wall_s", "calibrate", "count_plan", "estimate_batch", "estimate_run", "expected_attempts",
           "expected_max_retries", "expected_retries", "format_table", "kind_of", "limit_label", "observed_rates",
           "paper_shapes", "run_shapes", "speed_of", "staged_steps", "straggler_factor", "tokens_of", "usd",
           "worst_rates"]
