"""Prompts are ordered for providers' prompt caches: every agent turn of a paper-protocol run opens with the same
bytes (the common rules, the task, universe, constraints and the memo), and what varies comes after them.

The prompts checked are the request bodies as the simulated provider received them over HTTP, from a real run of
causal-debate-3 (three agents, two rounds of critique and revision, the JS intervention, a judge).
"""

import asyncio
import json
import os

from madbench.data.market.pack import load_pack
from madbench.data.memo import build_memo
from madbench.data.paths import CONFIGS_DIR
from madbench.data.scenario import Scenario, load_scenarios
from madbench.debate.config_file import load_debate_config
from madbench.debate.envelope import ENVELOPE_KEY
from madbench.gateway import ModelRouting, ModelSpec, RateLimits
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared

TURNS = ("propose", "critique", "revise", "judge")
#: The smallest memo of the paper's 35 scenarios (15.6k characters): the tightest case for the bound below.
SMALLEST_PAPER_MEMO = "2022Q1_rand3_1"
#: The shared prefix must be at least this share of the shortest agent prompt. The shortest is a proposal, whose own
#: part (the role's blocks, the instruction, the output outline) is about 1.4k characters, against 18k characters of
#: rules, task and memo for the smallest paper memo (93% measured); below 80%, something turn-specific has moved into
#: the shared part, or a turn's own part has grown past a quarter of the memo, and the cached share falls with it.
MIN_PREFIX_SHARE = 0.80


def agent_bodies(scenario: Scenario, pack, tmp_path, **spec_options) -> list[dict]:
    """The request body of every agent and judge turn of one causal-debate-3 run, as sent."""
    with SimProvider(record_bodies=True) as sim:
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True,
                         limits=RateLimits(max_concurrency=8), **spec_options)
        cfg = load_debate_config(CONFIGS_DIR / "debate" / "causal-debate-3.yaml")
        cfg = cfg.model_copy(update={"models": ModelRouting.single(spec)})
        result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path))
        bodies = list(sim.bodies)
    assert result.status == "ok", result.error
    turns = [b for b in bodies if (b.get("madbench_context") or {}).get("phase") in TURNS]
    phases = {(b.get("madbench_context") or {}).get("phase") for b in bodies}
    assert set(TURNS) <= phases and len(turns) >= 3 * 5 + 1  # 3 proposals, 2 rounds of 3 critiques and revisions, judge
    return turns


def agent_turns(scenario: Scenario, pack, tmp_path) -> list[list[dict]]:
    """The messages of every agent and judge turn of one causal-debate-3 run, as sent."""
    return [b["messages"] for b in agent_bodies(scenario, pack, tmp_path)]


def synthetic(make_pack):
    pack = load_pack(make_pack(tickers=("AAA", "BBB", "CCC", "DDD")))
    return pack, Scenario(id="syn", invest_quarter="2021Q3", tickers=["AAA", "BBB", "CCC", "DDD"],
                          constraints={"max_weight": 0.6, "min_holdings": 2})


def schema_of(body: dict) -> str:
    return json.dumps(body["response_format"]["json_schema"]["schema"], sort_keys=True)


def test_every_turn_of_a_run_is_sent_the_same_schema_and_answers_inside_it(make_pack, tmp_path):
    # A hosted provider's schema leads its prompt cache: one schema for the whole run, so no turn misses the memo
    pack, scenario = synthetic(make_pack)
    bodies = agent_bodies(scenario, pack, tmp_path)
    (schema,) = {schema_of(b) for b in bodies}
    alternatives = json.loads(schema)["properties"][ENVELOPE_KEY]["anyOf"]
    assert {a["title"] for a in alternatives} == {"Proposal", "Critique", "Revision", "JudgeDecision"}
    assert json.loads(schema)["required"] == [ENVELOPE_KEY]
    for b in bodies:  # each prompt shows its own phase's answer inside the envelope, naming its own peers
        assert f'{{"{ENVELOPE_KEY}": {{' in b["messages"][-1]["content"]


def test_a_turn_scoped_model_is_sent_each_turns_own_schema(make_pack, tmp_path):
    # schema_scope: turn (the local model's default): a critique's schema names only the critic's peers
    pack, scenario = synthetic(make_pack)
    bodies = agent_bodies(scenario, pack, tmp_path, schema_scope="turn")
    critiques = [b for b in bodies if b["madbench_context"]["phase"] == "critique"]
    for round_ in {b["madbench_context"]["round"] for b in critiques}:  # one schema per critic (and per round)
        this = [b for b in critiques if b["madbench_context"]["round"] == round_]
        assert len({schema_of(b) for b in this}) == len(this) == 3
    for b in critiques:
        schema = json.loads(schema_of(b))
        assert ENVELOPE_KEY not in schema["properties"]
        targets = {alt["properties"]["target_agent"]["const"] for alt in schema["properties"]["critiques"]["items"]["anyOf"]}
        assert b["madbench_context"]["agent_id"] not in targets and len(targets) == 2


def text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_every_turn_opens_with_the_same_system_message(make_pack, tmp_path):
    pack, scenario = synthetic(make_pack)
    turns = agent_turns(scenario, pack, tmp_path)
    memo = build_memo(scenario, pack).text
    systems = {m[0]["content"] for m in turns}
    assert len(systems) == 1 and all(m[0]["role"] == "system" for m in turns)
    (system,) = systems
    assert system.endswith(memo + "\n")  # the memo closes the shared part
    for who in ("You are the macro strategist", "You are agent", "round", "--- Proposal of agent"):
        assert who not in system  # roles, agents, rounds and peers' proposals come after it


@requires_shared
def test_the_shared_prefix_covers_the_memo_on_the_smallest_paper_memo(tmp_path):
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    scenario = next(s for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml") if s.id == SMALLEST_PAPER_MEMO)
    prompts = [text(m) for m in agent_turns(scenario, pack, tmp_path)]
    prefix = os.path.commonprefix(prompts)
    memo = build_memo(scenario, pack).text
    assert memo in prefix  # the whole memo, byte for byte, in every turn's shared opening
    shortest = min(map(len, prompts))
    assert len(prefix) / shortest >= MIN_PREFIX_SHARE, (len(prefix), shortest)
