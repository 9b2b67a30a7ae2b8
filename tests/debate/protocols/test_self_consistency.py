"""`self_consistency`: the combining maths (mean, the medoid vote over portfolios, the per-ticker median), the
stopping rule of generated-token matching, the sample indices, round-robin draws over the agents, and runs on the
rule-based answers, which draw distinct samples at temperature > 0 and collapse to one at temperature 0."""

import asyncio
import random
import statistics

import pytest

from madbench.data.errors import InputError
from madbench.data.scenario import Constraints
from madbench.debate.config_file import parse_debate_config
from madbench.debate.protocols.self_consistency import (
    SAMPLE_STRIDE,
    median_allocation,
    medoid,
    next_wave,
    sample_index,
    samples_for,
    vote_shares,
)
from madbench.debate.trace import read_trace
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from tests.debate.test_engine import TICKERS, config, world  # noqa: F401  (fixture)

U = ["A", "B", "C", "D"]


def alloc(**w):
    return {t: w.get(t, 0.0) for t in U}


def test_median_is_the_per_ticker_median_rescaled():
    samples = [alloc(A=0.5, B=0.5), alloc(A=0.4, B=0.3, C=0.3), alloc(A=0.6, C=0.4)]
    weights, cash, notes = median_allocation(samples, [0.0] * 3, U, Constraints())
    # medians A 0.5, B 0.3, C 0.3, D 0 (held by no sample): rescaled by 1.1 to sum to 1
    assert weights == pytest.approx({"A": 0.5 / 1.1, "B": 0.3 / 1.1, "C": 0.3 / 1.1, "D": 0.0})
    assert cash == 0.0 and notes == []
    # an even N takes the mean of the two middle values: B held by half the samples is held
    weights, _, _ = median_allocation(samples + [alloc(A=1.0)], [0.0] * 4, U, Constraints())
    med = {"A": 0.55, "B": 0.15, "C": 0.15, "D": 0.0}
    assert weights == pytest.approx({t: v / 0.85 for t, v in med.items()})


def test_median_holds_exactly_the_tickers_most_samples_hold():
    """For odd N, "weight ≥ x" wins a majority exactly when x ≤ the median: held ⟺ vote share > ½."""
    rng = random.Random(3)
    for _ in range(50):
        samples = []
        for _ in range(rng.choice([3, 5, 7])):
            held = rng.sample(U, rng.randint(2, 4))
            raw = {t: rng.random() + 0.05 for t in held}
            samples.append(alloc(**{t: v / sum(raw.values()) for t, v in raw.items()}))
        share = vote_shares(samples, U)
        if sum(s > 0.5 for s in share.values()) < 1:
            continue
        weights, _, notes = median_allocation(samples, [0.0] * len(samples), U, Constraints())
        assert {t for t in U if weights[t] > 0} == {t for t in U if share[t] > 0.5}
        assert sum(weights.values()) == pytest.approx(1.0) and notes == []
        meds = {t: statistics.median(s[t] for s in samples) for t in U}
        held = sum(meds.values())
        assert weights == pytest.approx({t: meds[t] / held for t in U})


def test_majority_is_the_proposal_nearest_all_others_under_l1():
    samples = [alloc(A=0.5, B=0.5), alloc(A=0.4, B=0.3, C=0.3), alloc(A=0.6, C=0.4)]
    # L1 distances: 0-1 0.6, 0-2 1.0, 1-2 0.6 (cash 0): sample 1 is nearest the others (1.2 against 1.6)
    assert medoid(samples, [0.0] * 3, U) == 1
    # the per-ticker median of these (A .5, B .3, C .3 rescaled) is no sample's portfolio; the medoid always is one
    med, _, _ = median_allocation(samples, [0.0] * 3, U, Constraints())
    assert med not in samples
    rng = random.Random(5)
    for _ in range(30):
        draws = [alloc(**{t: rng.random() for t in rng.sample(U, 2)}) for _ in range(rng.choice([2, 4, 7]))]
        cash = [rng.random() for _ in draws]
        i = medoid(draws, cash, U)
        pairs = list(zip(draws, cash, strict=True))
        dist = [sum(sum(abs(a[t] - b[t]) for t in U) + abs(ca - cb) for b, cb in pairs) for a, ca in pairs]
        assert dist[i] == min(dist) and i == dist.index(min(dist))  # the least total distance, earliest on a tie
    assert medoid([alloc(A=1.0), alloc(B=1.0)], [0.0, 0.0], U) == 0


def test_draws_stop_where_one_more_would_land_further_from_the_target():
    assert next_wave(1000, 0, 0, 200) == 1  # the first draw measures a draw's size
    assert next_wave(1000, 100, 1, 200) == 4  # 900 owed at 100 a draw: ⌊0.5 · 9⌋
    assert next_wave(1000, 900, 9, 200) == 1  # one draw owed: one at a time at the end
    assert next_wave(1000, 960, 10, 200) == 0  # 40 owed, a draw is 96: stopping is nearer
    assert next_wave(1000, 940, 10, 200) == 1  # 60 owed: one more lands 34 over, nearer than 60 under
    assert next_wave(10**6, 100, 1, 5) == 4 and next_wave(10**6, 500, 5, 5) == 0  # never past the cap
    # simulated: draws of varying length (by 2x) end within one draw of the target: under by at most half a mean
    # draw, over by at most the last draw less half a mean one
    rng = random.Random(9)
    for _ in range(50):
        target, spent, drawn = rng.randint(5_000, 50_000), 0, 0
        sizes = [rng.randint(400, 800) for _ in range(500)]
        while n := next_wave(target, spent, drawn, 500):
            spent, drawn = spent + sum(sizes[drawn:drawn + n]), drawn + n
        assert abs(spent - target) <= max(sizes)


def test_median_fills_up_to_the_constraints_by_vote_share_then_trims_and_caps():
    samples = [alloc(A=1.0), alloc(B=1.0), alloc(A=0.5, C=0.5)]
    # only A has a positive median; min_holdings 2 adds B (share ⅓, mean ⅓) before C (share ⅓, mean ⅙)
    weights, _, notes = median_allocation(samples, [0.0] * 3, U, Constraints(min_holdings=2))
    assert weights == pytest.approx({"A": 0.6, "B": 0.4, "C": 0.0, "D": 0.0}) and "added B" in notes[0]
    # max_weight 0.4 needs three names to carry the book: B then C join, and A is capped
    weights, _, _ = median_allocation(samples, [0.0] * 3, U, Constraints(max_weight=0.4))
    assert weights["A"] == pytest.approx(0.4) and sum(weights.values()) == pytest.approx(1.0)
    assert max(weights.values()) <= 0.4 + 1e-12 and weights["D"] == 0.0
    # max_tickers keeps the largest medians
    wide = [alloc(A=0.4, B=0.3, C=0.2, D=0.1)] * 3
    weights, _, notes = median_allocation(wide, [0.0] * 3, U, Constraints(max_tickers=2))
    assert weights == pytest.approx({"A": 0.4 / 0.7, "B": 0.3 / 0.7, "C": 0.0, "D": 0.0}) and "dropped C, D" in notes[0]
    # cash: the median cash, the invested part rescaled to the rest
    weights, cash, _ = median_allocation([alloc(A=0.8), alloc(A=0.5), alloc(A=0.9)], [0.2, 0.5, 0.1], U,
                                           Constraints(allow_cash=True))
    assert cash == 0.2 and weights["A"] == pytest.approx(0.8)


def test_samples_for_matches_tokens_and_sample_indices_never_collide():
    assert samples_for(205_058, 7_079) == 29  # causal-debate-3's estimate over one macro proposal's
    assert samples_for(100, 7_000) == 1
    with pytest.raises(ValueError):
        samples_for(1_000, 0)
    assert sample_index(3, 0) == 3  # sample 0 is the single agent's own draw at that replicate
    indices = {sample_index(k, i) for k in range(4) for i in range(30)}
    assert len(indices) == 120
    with pytest.raises(ValueError, match="below"):
        sample_index(SAMPLE_STRIDE, 0)


@pytest.mark.parametrize("options, message", [
    ({}, r"give one of samples \(N\), match_tokens_of or match_generated_of"),
    ({"samples": 3, "match_tokens_of": "causal-debate-3", "pilot": "results/x"}, r"got samples, a match"),
    ({"match_tokens_of": "a", "match_generated_of": "a", "pilot": "results/x"}, "not both"),
    ({"samples": 3, "pilot": "results/x"}, "go together"),
    ({"samples": 0}, "greater than or equal to 1"),
    ({"samples": 3, "combine": "vote"}, "combine"),
])
def test_bad_options_fail_when_the_config_loads(options, message):
    data = config("self-consistency-macro.yaml").model_dump(mode="json") | {"options": options}
    with pytest.raises(InputError, match=message):
        parse_debate_config(data, "sc.yaml")


def turns(tmp_path, result, kind):
    return [e for e in read_trace(tmp_path / result.run_id / "trace.jsonl").events if e["event"] == kind]


def run_sc(world, tmp_path, **update):  # noqa: F811
    pack, scenario = world
    cfg = config("self-consistency-macro.yaml")
    cfg = cfg.model_copy(update={"options": {**cfg.options, "samples": 5}, **update})
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path))
    assert result.status == "ok", result.error
    return result, turns(tmp_path, result, "turn"), turns(tmp_path, result, "llm_call")


@pytest.mark.parametrize("combine", ["mean", "majority", "median"])
def test_a_run_on_the_rule_based_analyst_draws_distinct_samples_and_combines_them(world, tmp_path, combine):  # noqa: F811
    result, sample_turns, calls = run_sc(world, tmp_path / combine, options={"samples": 5, "combine": combine})
    assert [t["label"] for t in sample_turns] == [f"propose:sample{i}" for i in range(5)]
    assert len(calls) == 5 and len({c["key"] for c in calls}) == 5  # each sample its own request (cache key)
    weights = [t["weights"] for t in sample_turns]
    assert len({tuple(sorted(w.items())) for w in weights}) == result.extras["distinct_samples"] > 1
    if combine == "mean":
        expected = {t: sum(w[t] for w in weights) / 5 for t in TICKERS}
    elif combine == "majority":
        expected = weights[medoid(weights, [t["cash"] or 0.0 for t in sample_turns], TICKERS)]
        assert expected in weights  # a portfolio a sample proposed
    else:
        med = {t: statistics.median(w[t] for w in weights) for t in TICKERS}
        expected = {t: v / sum(med.values()) for t, v in med.items()}
    assert result.weights == pytest.approx(expected, abs=1e-6)
    assert result.method == f"self_consistency:{combine}" and result.rounds_run == 0 and result.rho_bar is None
    assert result.extras["samples"] == 5 and not any(e for e in turns(tmp_path / combine, result, "crit"))
    divergence = turns(tmp_path / combine, result, "divergence")
    assert len(divergence) == 1 and divergence[0]["jsd"] > 0 and len(divergence[0]["pairwise"]) == 10


def test_sample_zero_is_the_single_agents_request_and_temperature_zero_collapses(world, tmp_path):  # noqa: F811
    pack, scenario = world
    single = asyncio.run(run_debate(scenario, pack, config("single-causal.yaml"), build_gateway(), tmp_path / "single"))
    single_key = next(c["key"] for c in turns(tmp_path / "single", single, "llm_call") if c["phase"] == "propose")
    result, sample_turns, calls = run_sc(world, tmp_path / "cold", temperature=0.0)
    assert calls[0]["key"] != single_key  # the temperature is part of the request
    warm, warm_turns, warm_calls = run_sc(world, tmp_path / "warm")
    assert warm_calls[0]["key"] == single_key  # same prompt, model, temperature and sample index: one cache entry
    # a deterministic analyst at temperature 0: N samples are one answer, and the run says so
    assert result.extras["distinct_samples"] == 1
    single_weights = next(t["weights"] for t in turns(tmp_path / "single", single, "turn") if t["phase"] == "propose")
    assert all(t["weights"] == single_weights for t in sample_turns) and result.weights == pytest.approx(single_weights)
    assert warm_turns[0]["weights"] == single_weights and warm.extras["distinct_samples"] > 1


def test_sample_zero_is_the_single_agents_answer_at_any_temperature(world, tmp_path):  # noqa: F811
    """Sample 0 shares the single agent's request (one cache key), so it must be its answer, not a noisy draw: which
    of the two asked first would otherwise decide what the cache holds. No max_weight here to cap a draw back."""
    pack, scenario = world
    scenario = scenario.model_copy(update={"constraints": Constraints(min_holdings=2)})
    single = asyncio.run(run_debate(scenario, pack, config("single-causal.yaml"), build_gateway(), tmp_path / "single"))
    answer = next(t for t in turns(tmp_path / "single", single, "turn") if t["phase"] == "propose")
    result, sample_turns, _ = run_sc((pack, scenario), tmp_path / "sc")
    assert result.extras["samples"] == 5 and config("self-consistency-macro.yaml").temperature > 0
    assert sample_turns[0]["weights"] == answer["weights"] and sample_turns[0]["output"] == answer["output"]
    assert all(t["weights"] != answer["weights"] for t in sample_turns[1:])  # the others draw around it


def test_a_config_with_knobs_the_protocol_would_ignore_fails_loudly(world, tmp_path):  # noqa: F811
    pack, scenario = world
    judged = config("mean3-causal.yaml").model_copy(update={"protocol": "self_consistency", "options": {"samples": 2},
                                                            "rounds": 1})
    with pytest.raises(InputError, match="self_consistency has no rounds"):
        asyncio.run(run_debate(scenario, pack, judged, build_gateway(), tmp_path))


def test_the_agents_are_drawn_round_robin_each_from_its_own_first_proposal(world, tmp_path):  # noqa: F811
    pack, scenario = world
    mean3 = config("mean3-causal.yaml")
    three = mean3.model_copy(update={"protocol": "self_consistency", "options": {"samples": 7}})
    result = asyncio.run(run_debate(scenario, pack, three, build_gateway(), tmp_path / "sc"))
    assert result.status == "ok", result.error
    roles = [t["role"] for t in turns(tmp_path / "sc", result, "turn")]
    assert roles == ["macro", "value", "technical"] * 2 + ["macro"]
    base = asyncio.run(run_debate(scenario, pack, mean3, build_gateway(), tmp_path / "mean"))
    first = {c["agent"]: c["key"] for c in turns(tmp_path / "mean", base, "llm_call") if c["phase"] == "propose"}
    keys = [c["key"] for c in turns(tmp_path / "sc", result, "llm_call")]
    assert keys[:3] == [first["macro"], first["value"], first["technical"]]  # draw 0 of each: the mean's request
    assert len(set(keys)) == 7


@pytest.mark.slow
def test_matched_draws_generate_the_debates_tokens_on_its_scenario_within_five_percent(world, tmp_path, monkeypatch):  # noqa: F811
    """Against the simulator (it counts tokens): the debate's completion tokens on a scenario as the target, the
    same agents drawn until their generated tokens come nearest it; without Ray, one scenario at two replicates."""
    from madbench.sim.provider import SimProvider
    from tests.debate.test_engine import sim_spec

    monkeypatch.setenv("SIM_KEY", "sim-placeholder-key")
    pack, scenario = world
    ratios = []
    with SimProvider() as sim:
        for k in range(2):
            debate = config("causal-debate-3.yaml", model=sim_spec(sim))
            out = asyncio.run(run_debate(scenario, pack, debate, build_gateway(), tmp_path / f"d{k}", sample_index=k))
            assert out.status == "ok", out.error
            target = out.totals["completion_tokens"]
            sc = config("self-consistency-3-majority.yaml", model=sim_spec(sim))
            sc = sc.model_copy(update={"options": {"targets": {scenario.id: target}, "combine": "majority"}})
            res = asyncio.run(run_debate(scenario, pack, sc, build_gateway(), tmp_path / f"s{k}", sample_index=k))
            assert res.status == "ok", res.error
            assert res.extras["target_generated_tokens"] == target and res.extras["samples"] > 3
            ratios.append(res.extras["generated_tokens"] / target)
    print(f"generated-token ratios (baseline / debate): {[round(r, 3) for r in ratios]}")
    assert all(0.95 <= r <= 1.05 for r in ratios), ratios
