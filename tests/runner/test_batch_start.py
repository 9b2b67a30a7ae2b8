"""A batch's actors start together: the limiters of its models are up before its first call (the runner actors' gateways
find them by name), and a service that does not come up fails the batch and stops the runner actors started beside it."""

from __future__ import annotations

import pytest

from madbench.gateway.limiter import RAY_NAMESPACE, actor_name
from madbench.runner.cache_actor import CachePlan
from madbench.runner.execute import _services_up, start_limiters
from tests.runner.test_routing_profiles import CONFIGS, expanded, write_batch


def test_the_limiters_of_a_batchs_models_are_up_before_its_first_call(tmp_path, ray_local):
    runs = expanded(write_batch(tmp_path, [CONFIGS / "a7.yaml"]))
    specs = {s.limit_key(): s for s in runs[0].config.models.named_specs()}
    assert len(specs) >= 2  # the agents' model and CRIT's (paper-openai routing)
    snapshots = ray_local.get(start_limiters(runs))
    assert len(snapshots) == len(specs)
    for key, spec in specs.items():
        # the actor a runner actor's gateway asks for (LimiterPool.get: ray_limiter, get_if_exists), with its limits
        limiter = ray_local.get_actor(actor_name(key), namespace=RAY_NAMESPACE)
        assert ray_local.get(limiter.snapshot.remote())["max_concurrency"] == spec.limits.max_concurrency


def test_a_batch_of_rule_based_models_starts_no_limiter(tmp_path):
    runs = expanded(write_batch(tmp_path, [CONFIGS / "a7.yaml"], model="rules/auto"))
    assert start_limiters(runs) == []  # rules/… calls take no lease (and no Ray is needed to say so)


class _Pool:
    killed = False

    def kill_all(self) -> None:
        self.killed = True


class _DeadBudget:
    def snapshot(self):
        raise RuntimeError("the budget actor died in its constructor")


def test_a_budget_actor_that_does_not_come_up_fails_the_batch_and_stops_its_runner_actors(tmp_path):
    pool = _Pool()
    with pytest.raises(RuntimeError, match="died in its constructor"):
        _services_up(None, pool, _DeadBudget(), CachePlan(str(tmp_path)), [])
    assert pool.killed
