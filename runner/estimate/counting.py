"""How many times each call shape is called in one run, and its critical path: a protocol's call plan
(``madbench.debate.protocols.protocol_plan``) counted under ``Rates``.

A plan's step runs once, or once each of ``E[T] = rounds · rounds_fraction`` debate rounds, or, when an
intervention must fire first (``Step.when``), ``expected_attempts`` times as often. A checked call (``Call.check``:
RCA on a revision) makes ``er = expected_retries`` retried calls and ``1 + er`` checks. On the critical path a
concurrent step costs its slowest call (``Tally.step``) plus, when checked, the check step and ``E[max over the
calls of r]`` (retry + check) pairs; a sequential step (CRIT-causal: one agent after another) costs the sum of its
calls and their expected checks. Every formula is a pure function below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.debate.protocols import protocol_plan
from madbench.debate.protocols.plan import Call, Check, Firing, Plan, Step
from madbench.debate.protocols.staged import SLICES
from madbench.runner.estimate.assumptions import LATENCY_CV, Calibration, Rates
from madbench.runner.estimate.profile_shapes import paper_shapes
from madbench.runner.estimate.shapes import MemoInfo, Shape
from madbench.runner.estimate.stage_shapes import StageStep, stage_shapes
from madbench.runner.estimate.tally import RunEstimate, Tally


def expected_retries(p: float, limit: int) -> float:
    """Expected retries when each try fails with probability ``p`` and at most ``limit`` retries follow:
    ``E[r] = Σ_{k=1..limit} P(r ≥ k) = Σ_{k=1..limit} p^k``."""
    return sum(p ** k for k in range(1, limit + 1))


def expected_max_retries(p: float, limit: int, n: int) -> float:
    """Expected largest retry count among ``n`` independent chains (each as ``expected_retries``):
    ``E[max r] = Σ_{k=1..limit} P(max ≥ k) = Σ_k 1 − (1 − p^k)^n``."""
    return sum(1 - (1 - p ** k) ** n for k in range(1, limit + 1)) if n > 0 else 0.0


def expected_attempts(p_fire: float, p_again: float, limit: int) -> float:
    """Expected re-runs of an intervention that fires with ``p_fire`` and, after each re-run, fires again with
    ``p_again``, up to ``limit`` re-runs: ``p_fire · Σ_{k=0..limit−1} p_again^k``."""
    return p_fire * sum(p_again ** k for k in range(limit))


def rate(rates: Rates, name: str) -> float:
    if not hasattr(rates, name):
        raise ValueError(f"a protocol's call plan names the rate {name!r}, which runner/estimate/assumptions.py Rates "
                         f"does not declare: add it there (with its expected value) or name one of {', '.join(vars(rates))}")
    return getattr(rates, name)


def attempts(f: Firing, rates: Rates) -> float:
    return expected_attempts(rate(rates, f.rate), rate(rates, f.again or f.rate), f.max_retries)


def retries(c: Check, rates: Rates) -> float:
    return expected_retries(rate(rates, c.firing.rate), c.firing.max_retries)


Shapes = Callable[[Call], Shape]


def _together(tally: Tally, step: Step, of: Shapes, rates: Rates, times: float) -> None:
    """``times`` occurrences of a concurrent step: each call with its checks and retries counted; on the critical
    path the step, the check step and ``E[max r]`` (retry + check) pairs."""
    for c in step.calls:
        tally.calls(of(c), times * c.count)
        if c.check:
            er = retries(c.check, rates)
            tally.calls(of(c.check.retry), times * er)
            tally.calls(of(c.check.call), times * (1 + er))
    tally.step([of(c) for c in step.calls for _ in range(c.count)], times)
    checked = [c.check for c in step.calls if c.check]
    if checked:
        tally.step([of(c.call) for c in checked], times)
        pair = max(tally.latency(of(c.retry)) + tally.latency(of(c.call)) for c in checked)
        f = checked[0].firing
        tally.est.path_s += times * expected_max_retries(rate(rates, f.rate), f.max_retries, len(checked)) * pair


def _one_after_another(tally: Tally, step: Step, of: Shapes, rates: Rates, times: float) -> None:
    """``times`` occurrences of a sequential step, agent after agent: on the critical path every call and its
    expected checks and retries."""
    chains = []
    for _, group in groupby(step.calls, key=lambda c: c.agent):
        calls = list(group)
        for c in calls:
            tally.calls(of(c), times * c.count)
        chain = sum(tally.latency(of(c)) for c in calls)
        for check in (c.check for c in calls if c.check):
            er = retries(check, rates)
            tally.calls(of(check.retry), times * er)
            tally.calls(of(check.call), times * (1 + er))
            chain += (1 + er) * tally.latency(of(check.call)) + er * tally.latency(of(check.retry))
        chains.append(chain)
    tally.est.path_s += times * sum(chains)


def count_plan(plan: Plan, of: Shapes, rates: Rates, cv: float = LATENCY_CV) -> RunEstimate:
    """Calls, tokens, cost and critical path of one run of ``plan`` (see the module docstring)."""
    tally = Tally(rates.validation_retries, cv)
    rounds = plan.rounds * rates.rounds_fraction
    for step in plan.steps:
        times = rounds if step.each_round else 1.0
        if step.when is not None:
            times = times * attempts(step.when, rates)
        if times > 0 and step.calls:
            (_one_after_another if step.sequential else _together)(tally, step, of, rates, times)
    return tally.finish()


@dataclass(frozen=True)
class RunShapes:
    """One run's plan and the shape of each of its calls."""
    plan: Plan
    of: Shapes


def _profile_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, plan: Plan, calib: Calibration | None) -> Shapes:
    return paper_shapes(cfg, scenario, memo, calib).of


def _stage_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, plan: Plan, calib: Calibration | None) -> Shapes:
    return stage_shapes(cfg, scenario, memo, plan, calib).__getitem__


#: How a plan's calls are shaped, by where its prompts come from (``Plan.prompts``).
SHAPERS = {"profiles": _profile_shapes, "stages": _stage_shapes}


def run_shapes(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, calib: Calibration | None = None) -> RunShapes:
    """The protocol's plan for this scenario (its desks: the memo slices with evidence) and its calls' shapes."""
    plan = protocol_plan(cfg, tuple(d for d in SLICES if d in memo.slice_chars))
    return RunShapes(plan, SHAPERS[plan.prompts](cfg, scenario, memo, plan, calib))


def staged_steps(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, calib: Calibration | None = None) -> list[StageStep]:
    """A staged protocol's call shapes, step by step."""
    shapes = run_shapes(cfg, scenario, memo, calib)
    return [StageStep(tuple(shapes.of(c) for c in step.calls)) for step in shapes.plan.steps if step.calls]


def estimate_run(cfg: DebateConfig, scenario: Scenario, memo: MemoInfo, rates: Rates, calib: Calibration | None = None,
                 shapes: RunShapes | None = None) -> RunEstimate:
    """One run of ``cfg`` on ``scenario`` under ``rates``."""
    shapes = shapes or run_shapes(cfg, scenario, memo, calib)
    return count_plan(shapes.plan, shapes.of, rates, calib.latency_cv if calib else LATENCY_CV)
