"""A run that failed after every one of its calls was answered fails again on retry (the answers come back from the
response cache): the run says so and names the way out, and the retry command is not offered for it.

The failure here is one a real batch can have: a self_consistency config matched on cost (`match: cost` with its
`targets`) on a model without a price. Its first draw is asked and answered, and then the run fails, since that
answer's cost is unknown. No call failed, so the classification (runner/batch_status.py ``repeats_on_retry``) says a
retry would repeat it, which it does: the same draw from the cache, the same unknown cost."""

import pytest
import yaml

from madbench.debate.trace import read_trace
from madbench.results import read_manifest
from madbench.runner.cli import main
from madbench.runner.store import BatchLayout
from madbench.sim.provider import SimProvider
from tests.runner.test_batch import TICKERS, write_batch

UNPRICED = "match: cost, but model openai/madbench-sim has no price"


def cost_matched_config(tmp_path):
    """self_consistency drawing the macro analyst's proposals up to a cost target on scenario s2021Q3."""
    path = tmp_path / "sc-cost.yaml"
    path.write_text(yaml.safe_dump({
        "name": "sc-cost", "agents": [{"role": "macro", "tier": "causal"}], "rounds": 0, "aggregation": "mean",
        "protocol": "self_consistency",
        "options": {"match": "cost", "targets": {"s2021Q3": 0.01}, "combine": "mean"}}))
    return path


@pytest.mark.slow
def test_a_run_failed_after_every_call_was_answered_is_not_offered_retry_failed_which_would_repeat_it(make_pack, tmp_path, capsys):
    with SimProvider() as sim:
        model = {"model": "openai/madbench-sim", "api_base": sim.url, "send_context": True}
        batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), quarters=["2021Q3"], model=model,
                            replicates=1, configs=[str(cost_matched_config(tmp_path))], retries=0)
        assert main(["run", str(batch), "--quiet"]) == 1
        err = capsys.readouterr().err
        asked = len(sim.stats.billed)
        assert asked > 0
        assert "1 run(s) failed" in err and UNPRICED in err
        assert "1 run(s) failed after every call was answered (no call failed)" in err
        assert "replays the same answers from the response cache and fails the same way" in err
        assert "on the model's answers" not in err  # what failed here is the cost match, not the answers
        assert "raise `replicates`" in err and "fix what it names" in err and "retry them with" not in err
        root = tmp_path / "results" / "t"
        run = read_manifest(root).runs[0]
        kinds = [e["event"] for e in read_trace(BatchLayout(root).trace_path(run.run_id)).events]
        assert "llm_call" in kinds and "llm_failure" not in kinds  # answered, and validated: the failure came after
        # The retry it warns of: the same answers from the cache, the same failure, no new request.
        assert main(["run", str(batch), "--quiet", "--retry-failed"]) == 1
        again = capsys.readouterr().err
        assert len(sim.stats.billed) == asked
        assert UNPRICED in again and "retry them with" not in again
    run = read_manifest(root).runs[0]
    assert run.status == "failed" and run.attempts == 1
