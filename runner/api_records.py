"""The typed parts of what running and estimating a batch return (``madbench.run``, ``madbench.estimate``): each
record a pydantic model with its fields declared, read as attributes and dumped with ``model_dump()``.

Every model forbids undeclared fields: a figure the runner or the estimator adds is declared here, never dropped."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from madbench.runner.estimate.assumptions import Rates

#: A figure the estimate rounds: an int stays an int (its JSON says 12, not 12.0).
Number = int | float


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Spend(Record):
    """What the batch spent against its cap (``max_cost_usd``), over every invocation."""
    cap_usd: float | None
    spent_usd: float
    #: Of ``spent_usd``, what earlier invocations spent.
    spent_before_usd: float
    #: Why the cap stopped the batch, or None.
    reached: str | None
    #: Calls of models without a price in the committed runs: the spend is unknown, not $0, when there are any.
    unpriced_calls: int = 0


class TableRows(Record):
    """Rows of the batch's tables (runs.parquet, rounds.parquet, calls.parquet) after this invocation."""
    runs: int
    rounds: int
    calls: int


class RunCounts(Record):
    """The batch's runs by status in its manifest."""
    ok: int
    failed: int
    pending: int
    #: Runs a sequential batch's decision made unnecessary (never started; runner/sequential.py).
    not_needed: int = 0


class ProviderBatchUse(Record):
    """Provider batch mode: the collector's last figures and the journal's account of the batches
    (``provider_batches.journal_summary``)."""
    #: Batches created at the provider, the requests in them, answered, resubmitted from an expired or failed batch,
    #: and answered with an error (then asked again).
    provider_batches: int
    requests: int
    answered: int
    resubmitted: int
    errored: int
    #: Journal entries by state, and which prices each provider/model's batches were accounted at.
    states: dict[str, int]
    pricing: dict[str, str]
    #: The collector's queue when it stopped.
    queued: int
    in_batch: int
    answers: int
    in_flight_runs: int
    journaled: int
    failures: list[Any]
    #: The journal's folder (set by ``madbench.run``).
    journal: str | None = None


class BatchOutcome(Record):
    """What one invocation of ``execute.run_batch`` did."""
    #: Runs in the batch, committed before this invocation, and submitted by it.
    runs: int
    skipped: int
    submitted: int
    wall_s: float
    #: Of ``wall_s``, the final compaction's: the row logs folded into the tables (runner/store.py).
    compaction_s: float = 0.0
    #: Committed runs whose table rows were rebuilt from their traces.
    parts_rebuilt: int
    budget: Spend
    #: finished, interrupted, stopped: …
    state: str
    tables: TableRows
    status: RunCounts
    #: Runs whose result arrived twice (the second was not committed again).
    committed_twice: list[str] = []
    #: The cluster cache actor's figures (runner/cache_actor.py), None without one.
    cache: dict[str, Any] | None = None
    provider_batches: ProviderBatchUse | None = None


class EstimateFigures(Record):
    """Calls, tokens and cost of some runs, expected and worst case (``estimate.batch_estimate``)."""
    runs: int
    calls: Number
    calls_worst: Number
    attempts: Number
    prompt_tokens: Number
    completion_tokens: Number
    prompt_tokens_worst: Number
    completion_tokens_worst: Number
    cost_usd: Number | None
    cost_usd_worst: Number | None
    cost_batch_usd: Number | None
    cost_batch_usd_worst: Number | None
    cost_per_scenario_usd: Number | None
    #: The cost of the calls of priced models (all of it when ``models_without_price`` is empty).
    cost_known_part_usd: Number
    cost_known_part_usd_worst: Number
    models_without_price: list[str]


class _Config(Record):
    config: str


class ConfigEstimate(EstimateFigures, _Config):  # the config first, as the estimate's JSON has it
    """One config's runs: their figures, a scenario's time, and the config's wall time were it alone."""
    minutes_per_scenario: Number
    minutes_per_scenario_worst: Number
    wall_s_alone: Number
    bottleneck_alone: str


class ModelLine(Record):
    """The expected calls, tokens and cost of one model in one kind of call."""
    model: str
    kind: str
    calls: Number
    prompt_tokens: Number
    completion_tokens: Number
    cost_usd: Number | None


class ObservedCalls(Record):
    """A pilot's calls of one model and kind: their count and mean tokens and latency, and the factors
    (observed ÷ estimated) the calibration applies, None where the estimator predicts no such call."""
    model: str
    kind: str
    calls: int
    prompt_tokens_mean: float
    completion_tokens_mean: float
    latency_s_mean: float
    factors: dict[str, float] | None


class CalibrationSource(Record):
    """Where a calibrated estimate's rates came from: the pilot batch, its runs, each rate's source, the latency
    spread and the observed means per model and kind."""
    source: str
    runs: int
    rate_sources: dict[str, str]
    latency_cv: float
    observed: list[ObservedCalls]


class SequentialOutlook(Record):
    """A sequential design under one hypothesis: how often it rejects, and the scenarios, cost and time expected."""
    reject: float
    expected_scenarios: float
    expected_cost_usd: float | None
    expected_wall_s: float


class SequentialPlan(Record):
    """A sequential batch's looks and the scenarios it uses at most and on average under H0 and H1."""
    looks: list[int]
    max_scenarios: int
    efficacy_z: list[float]
    futility_z: list[float] | None
    power: float
    notes: list[str]
    effect: float
    planned_power: float
    detectable_effect: float
    df: list[float]
    fixed_cost_usd: float | None
    h0: SequentialOutlook
    h1: SequentialOutlook


__all__ = ["BatchOutcome", "CalibrationSource", "ConfigEstimate", "EstimateFigures", "ModelLine", "Number", "ObservedCalls",
           "ProviderBatchUse", "Rates", "RunCounts", "SequentialOutlook", "SequentialPlan", "Spend", "TableRows"]
