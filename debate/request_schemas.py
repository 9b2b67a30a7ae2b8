"""The JSON schema sent with each request: the output model's schema narrowed to this scenario.

Tickers become an enum of the universe, evidence IDs an enum of what the agent may cite, critique
targets and owed responses one alternative each, and arrays get length bounds. Constrained decoders then
cannot name an outside ticker or an unseen ID, nor loop inside a list; validation still checks everything
exactly (not every provider enforces schemas). The paper's phases (``request_schema``) and the staged
protocols' stages (``constrained_schema``) share the primitives below.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from pydantic import BaseModel

from madbench.debate.envelope import envelope_schema
from madbench.debate.schemas import Tier, critique_targets, json_schema, schema_for
from madbench.debate.validation import TurnRules
from madbench.gateway.models import SchemaScope
from madbench.gateway.phases import AGENT_PHASES

#: Evidence IDs are enumerated up to this many; beyond it a phase gets a bounded ID pattern, a stage no constraint.
ENUM_LIMIT = 300


def ticker_enum(universe: list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": list(universe)}


def evidence_id_enum(ids: set[str]) -> dict[str, Any] | None:
    """The IDs as an enum, or None when there are none or more than ``ENUM_LIMIT``."""
    return {"type": "string", "enum": sorted(ids)} if 0 < len(ids) <= ENUM_LIMIT else None


# -- the paper's phases --------------------------------------------------------------------------

def request_schema(phase: str, rules: TurnRules) -> dict[str, Any]:
    """The phase's JSON schema for the agent's tier (``rules.tier``) with this scenario's tickers, agents and
    evidence IDs as enums.

    Constrained decoders then cannot emit a ticker outside the universe or an
    ID outside the memo (for large memos: an ID of this memo's shape);
    validation still checks both exactly (not every provider enforces schemas).
    """
    schema = json_schema(schema_for(phase, rules.tier))
    defs = schema.get("$defs", {})
    tickers = ticker_enum(rules.universe)
    for name in ("Holding", "PositionRationale"):
        if name in defs:
            defs[name]["properties"]["ticker"] = tickers
    if "Claim" in defs:
        defs["Claim"]["properties"]["impacts_positions"] = {"type": "array", "items": tickers}
    item_name = _item_def_name(schema.get("properties", {}).get("critiques"))
    if item_name in defs and rules.peer_claims:
        defs[item_name]["properties"]["target_agent"] = {"type": "string", "enum": sorted(rules.peer_claims)}
    if rules.require_known_evidence and rules.evidence_ids:
        # An enum of the memo's IDs up to a size; beyond it a bounded pattern (prefix alternatives plus a
        # short field), since grammar-constrained decoding slows with every literal. An unbounded pattern
        # lets a small model loop inside one ID. Existence in the memo is always checked by validation.
        item = evidence_id_enum(rules.evidence_ids)
        if item is None:
            prefixes = sorted({i.split("-", 1)[0] for i in rules.evidence_ids})
            item = {"type": "string", "pattern": f"^({'|'.join(map(re.escape, prefixes))})-[A-Z0-9_]{{1,12}}$"}
        ids = {"type": "array", "items": item}
        for name in ("Claim", "CritiqueItem"):
            if name in defs:
                defs[name]["properties"]["evidence_ids"] = ids
        if "evidence_ids" in schema.get("properties", {}):
            schema["properties"]["evidence_ids"] = ids
    _bound(schema)  # after the evidence lists are replaced, so that they are bounded too
    _one_of_each(schema, rules)
    return schema


#: The phases whose answers share a run's envelope: the agents' (the scorer's CRIT and RCA, and the staged protocols'
#: stages, send their own schemas).
ENVELOPE_PHASES = AGENT_PHASES


def enveloped(phase: str, scope: SchemaScope) -> bool:
    """Whether ``phase``'s turns on a model are sent the run's envelope (``run_schema``) instead of their own schema:
    with the model's ``schema_scope`` (``Gateway.schema_scope``) "run"."""
    return phase in ENVELOPE_PHASES and scope == "run"


def run_schema(rules: TurnRules, tiers: set[Tier]) -> dict[str, Any]:
    """Every phase's schema for the run's tiers, fitted to what all of a run's turns share (its universe and memo
    IDs, not a turn's peers' claims or the critiques it owes), as one envelope (debate.envelope): the same bytes
    for every agent, phase and round, so a provider's prompt cache, which the schema leads, serves the memo behind
    it on every call after the first. Validation still checks each turn against its own phase exactly."""
    wide = dataclasses.replace(rules, peer_claims={}, owed_responses=None)
    first_of: dict[type[BaseModel], tuple[str, Tier]] = {}
    for tier in sorted(tiers):
        for phase in ENVELOPE_PHASES:
            first_of.setdefault(schema_for(phase, tier), (phase, tier))
    return envelope_schema([request_schema(phase, dataclasses.replace(wide, tier=tier)) for phase, tier in first_of.values()])


def _item_def_name(prop: dict[str, Any] | None) -> str | None:
    """The $defs name a list property's items refer to (CritiqueItem, or a basic agent's BasicCritiqueItem)."""
    ref = ((prop or {}).get("items") or {}).get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref.startswith("#/$defs/") else None


def _one_of_each(schema: dict[str, Any], rules: TurnRules) -> None:
    """Critique items as one alternative per peer (with that peer's claim ids, or its allocation when it has no
    claims), and revision responses as one alternative per critique received, so that a constrained decoder can
    only target what exists. Whether every critique is answered stays the agent's choice (CRIT and RCA judge it),
    so no minimum count is set."""
    defs, props = schema.get("$defs", {}), schema.get("properties", {})

    def variant(base: dict[str, Any], fixed: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {**copy.deepcopy(base), "properties": {**copy.deepcopy(base["properties"]), **fixed}}

    if "critiques" in props and rules.peer_claims:
        item = defs.pop(_item_def_name(props["critiques"]))
        props["critiques"]["items"] = {"anyOf": [
            variant(item, {"target_agent": {"type": "string", "const": peer},
                           "target_claim": {"type": "string", "enum": critique_targets(claims)}})
            for peer, claims in sorted(rules.peer_claims.items())]}
    if "critique_responses" in props and rules.owed_responses is not None:
        owed = list(dict.fromkeys(rules.owed_responses))
        if not owed:
            props["critique_responses"] = {**props["critique_responses"], "maxItems": 0}
        else:
            item = defs.pop("CritiqueResponse")
            props["critique_responses"] = {**props["critique_responses"], "items": {"anyOf": [
                variant(item, {"from_agent": {"type": "string", "const": a}, "target_claim": {"type": "string", "const": c}})
                for a, c in owed]}}


#: Length bounds sent to constrained decoders (llama.cpp honours them; validation does not rely on them).
#: They keep a small model from looping inside an array until its context is full. (String maxLength
#: is left out on purpose: llama.cpp expands it into a grammar so large that decoding crawls.)
ARRAY_BOUNDS = {"claims": 4, "evidence_ids": 3, "assumptions": 2, "falsifiers": 2, "impacts_positions": 2,
                "supporting_claims": 2, "risks_or_falsifiers": 2, "critiques": 6, "critique_responses": 12,
                "consensus_points": 3, "dissent_points": 3}


def _bound(schema: dict[str, Any]) -> None:
    for node in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in node.get("properties", {}).items():
            if prop.get("type") == "array" and name in ARRAY_BOUNDS:
                prop["maxItems"] = ARRAY_BOUNDS[name]


# -- the staged protocols' stages -----------------------------------------------------------------

#: Array bounds for constrained decoders (validation does not rely on them): they keep a small model
#: from looping inside a list until its budget is spent.
STAGE_ARRAY_BOUNDS = {"evidence_ids": 4, "key_points": 3, "points": 3, "favoured_tickers": 3, "facts": 6,
                      "open_questions": 2, "claims": 4, "would_change": 2, "concessions": 2, "agreements": 3,
                      "disagreements": 3, "unresolved": 3, "invalidation_conditions": 2, "evidence_gaps": 2,
                      "disputes": 2, "caps": 4}


def constrained_schema(schema_model: type[BaseModel], universe: list[str], evidence_ids: set[str],
                       enums: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The stage's JSON schema with the universe's tickers and the visible evidence IDs as enums, and arrays
    bounded, so a constrained decoder cannot name an outside ticker or an unseen ID. Validation still checks
    both exactly (not every provider enforces schemas)."""
    schema = json_schema(schema_model)
    tickers = ticker_enum(universe)
    id_enum = evidence_id_enum(evidence_ids)
    ids: dict[str, Any] | None = {"type": "array", "items": id_enum} if id_enum is not None else None

    def walk(node):
        if isinstance(node, dict):
            props = node.get("properties", {})
            for name, sub in props.items():
                if enums and name in enums:
                    props[name] = {"type": "string", "enum": list(enums[name])}
                elif name == "ticker":
                    props[name] = dict(tickers)
                elif name in ("favoured_tickers",):
                    props[name] = {"type": "array", "items": dict(tickers)}
                elif name == "evidence_ids" and ids is not None:
                    props[name] = {**copy.deepcopy(ids), **({"minItems": sub["minItems"]} if "minItems" in sub else {})}
                elif name == "evidence_ids" and not evidence_ids and "minItems" not in sub:
                    props[name] = {"type": "array", "items": {"type": "string"}, "maxItems": 0}  # nothing citable
                elif name == "metric_id" and ids is not None:
                    props[name] = dict(ids["items"])
                elif name in ("signals", "views"):  # one entry per ticker
                    props[name] = {**sub, "minItems": len(universe), "maxItems": len(universe)}
                if isinstance(props[name], dict) and props[name].get("type") == "array" and name in STAGE_ARRAY_BOUNDS:
                    props[name]["maxItems"] = min(props[name].get("maxItems", 99), STAGE_ARRAY_BOUNDS[name])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    return schema
