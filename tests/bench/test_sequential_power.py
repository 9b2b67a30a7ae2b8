"""The power a shipped sequential design states is the power it has: the runner's design for the batch (planned on
the t scale of its quarter-clustered looks) against `bench sequential`'s simulation of the same looks."""

from pathlib import Path

import pytest
import yaml

from madbench.bench.sequential_designs import bench_batch
from madbench.data.scenario import load_scenarios
from madbench.runner.batch import load_batch, resolve_scenarios

ROOT = Path(__file__).resolve().parents[2]
SEQUENTIAL_BATCHES = sorted(p for p in (ROOT / "configs" / "batches").glob("*.yaml")
                            if "sequential" in (yaml.safe_load(p.read_text()) or {}))
#: 20,000 experiments: the simulated power's standard error is about 0.003, so 0.03 is ten of them.
EXPERIMENTS = 20_000


def _quarters(path: Path) -> dict[str, str]:
    spec, base = load_batch(path)
    return {s.id: s.invest_quarter for s in resolve_scenarios(spec, base, None, str(path))}


def test_a7_sequential_is_among_the_shipped_designs():
    assert ROOT / "configs" / "batches" / "a7-sequential.yaml" in SEQUENTIAL_BATCHES


@pytest.mark.parametrize("path", SEQUENTIAL_BATCHES, ids=lambda p: p.stem)
def test_a_shipped_design_has_the_power_it_states(path):
    spec = load_batch(path)[0]
    null, alternative = bench_batch(spec, _quarters(path), EXPERIMENTS, seed=11)
    assert not alternative["notes"] or "cannot reach" not in " ".join(alternative["notes"])
    assert alternative["planned_power"] == pytest.approx(spec.sequential.power, abs=1e-3)
    assert alternative["reject_towards"] == pytest.approx(spec.sequential.power, abs=0.03)
    assert null["reject"] <= spec.sequential.alpha + 0.005  # the looks keep their alpha under clustering
    assert len(set(alternative["df"])) > 1 and max(alternative["df"]) < alternative["looks"][-1] - 1


def test_the_paper_scenarios_cluster_the_a7_looks():
    quarters = _quarters(ROOT / "configs" / "batches" / "a7-sequential.yaml")
    paper = load_scenarios(ROOT.parent / "shared" / "data" / "paper" / "scenarios_35.yaml")
    assert len(quarters) == len(paper) == 35 and len(set(quarters.values())) == 12


def test_designs_on_correlated_quarters_plan_the_power_the_clustered_looks_have():
    from madbench.bench.sequential_designs import bench_sequential, schedule_clusters
    market = {s.id: s.invest_quarter for s in load_scenarios(ROOT / "configs" / "scenarios" / "market-35.yaml")}
    rows = bench_sequential(EXPERIMENTS // 2, 35, 5, 0.39, seed=3, clusters=schedule_clusters(market, 0), icc=0.15)
    for r in rows:
        if r["cell"] == "alternative" and "not offered" not in r["design"]:
            assert r["reject_towards"] == pytest.approx(r["planned_power"], abs=0.03), r["design"]
        if r["cell"] == "null" and "not offered" not in r["design"]:
            assert r["reject"] <= 0.05 + 0.007, r["design"]  # the clustered t keeps alpha (three SEs of slack)
