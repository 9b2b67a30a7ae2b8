"""The schema a grammar-constrained local model (llama.cpp) is sent, adapted from the request schema.

llama.cpp turns a JSON schema into a grammar but ignores numeric bounds, and a
small model left free repeats tickers and claim ids, writes all-zero books, or
writes list items until its budget runs out. Each step below narrows the
grammar so that every answer it allows is still valid under the original
schema. The request, its cache key and the validation are unchanged: only what
the decoder may write is narrower.
"""

from __future__ import annotations

import copy
import re
from typing import Any


def llama_cpp_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """All the adaptations, on one copy of the request schema (each step below edits it in place), in the
    order they depend on each other: claim ids before the ticker tuples copy the rationale item, and ticker
    tuples before the allocation grid."""
    out = bounded_numbers_as_enums(schema)  # a new tree
    for step in (claim_tuples, ticker_tuples, nonzero_allocations, one_each_tuples):
        step(out)
    return out


def _item_def(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """The $defs entry a list's items refer to, if they refer to one."""
    ref = (prop.get("items") or {}).get("$ref", "")
    return defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None


def _fixed(item: dict[str, Any], name: str, value: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object schema with one property's schema replaced."""
    return {**item, "properties": {**item["properties"], name: value}}


def bounded_numbers_as_enums(schema: dict[str, Any], steps: int = 20) -> dict[str, Any]:
    """Numbers bounded on both sides (a confidence, a stop-loss of 0–50%) as an enum on a grid of ``steps``
    intervals (exclusive bounds left out), and small bounded integer scales as the enum of their values.
    llama.cpp's grammar ignores numeric bounds, so a small model writes a confidence of 3.5 or a stop-loss of
    80% and fails validation; an enum it cannot leave."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            lo, hi = node.get("minimum", node.get("exclusiveMinimum")), node.get("maximum", node.get("exclusiveMaximum"))
            if node.get("type") == "integer" and node.get("minimum") is not None and node.get("maximum") is not None \
                    and 0 < node["maximum"] - node["minimum"] <= 20:  # a small integer scale, e.g. a 1–5 risk score
                rest = {k: v for k, v in node.items() if k not in ("type", "minimum", "maximum")}
                return rest | {"enum": list(range(int(node["minimum"]), int(node["maximum"]) + 1))}
            if node.get("type") == "number" and lo is not None and hi is not None and hi > lo:
                values = [round(lo + (hi - lo) * k / steps, 6) for k in range(steps + 1)]
                values = [v for v in values if ("exclusiveMinimum" not in node or v > lo) and ("exclusiveMaximum" not in node or v < hi)]
                return {k: v for k, v in node.items() if k not in ("type", "minimum", "maximum", "exclusiveMinimum",
                                                                    "exclusiveMaximum")} | {"enum": values}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    bounded: dict[str, Any] = walk(copy.deepcopy(schema))
    return bounded


#: Per-ticker lists: the answer must hold exactly one entry per ticker of the universe.
PER_TICKER_LISTS = ("allocation", "signals", "views", "position_rationale")


def ticker_tuples(schema: dict[str, Any]) -> None:
    """A per-ticker list whose item type names the universe as a ticker enum becomes a tuple with one entry per
    ticker, in universe order (``prefixItems`` with ``const`` tickers). llama.cpp then cannot repeat or skip a
    ticker, which a small model otherwise does; the validated answer is the same shape as before."""
    defs = schema.get("$defs", {})

    def tuple_for(prop: dict[str, Any]) -> dict[str, Any] | None:
        item = _item_def(prop, defs)
        tickers = (((item or {}).get("properties") or {}).get("ticker") or {}).get("enum")
        if item is None or not tickers:
            return None
        entries = [_fixed(item, "ticker", {"const": t}) for t in tickers]
        return {"type": "array", "prefixItems": entries, "minItems": len(tickers), "maxItems": len(tickers)}

    for node in [schema, *defs.values()]:
        for name, prop in (node.get("properties") or {}).items():
            if name in PER_TICKER_LISTS and isinstance(prop, dict) and prop.get("type") == "array":
                replaced = tuple_for(prop)
                if replaced is not None:
                    node["properties"][name] = replaced


#: Weight grid for allocations written under a grammar (5% steps; the normalize policy rescales).
WEIGHT_GRID = [round(0.05 * k, 2) for k in range(21)]


def nonzero_allocations(schema: dict[str, Any]) -> None:
    """An allocation tuple (see ``ticker_tuples``) becomes one with weights on a 5% grid and at least one weight
    above 0: the union, over k, of "the first k weights are 0 and weight k is positive". A small model otherwise
    answers an all-zero book again and again, which no policy can repair. Every answer it allows is valid under
    the original schema (an all-cash answer is the one it rules out)."""
    zero, positive, any_ = {"const": 0}, {"enum": WEIGHT_GRID[1:]}, {"enum": WEIGHT_GRID}
    for node in [schema, *schema.get("$defs", {}).values()]:
        book = (node.get("properties") or {}).get("allocation")
        entries = (book or {}).get("prefixItems") if isinstance(book, dict) else None
        if not entries or not all("weight" in (e.get("properties") or {}) for e in entries):
            continue
        node["properties"]["allocation"] = {"anyOf": [
            {"type": "array", "minItems": len(entries), "maxItems": len(entries), "prefixItems": [
                _fixed(e, "weight", zero if i < k else positive if i == k else any_) for i, e in enumerate(entries)]}
            for k in range(len(entries))]}


#: Claims a grammar-constrained local model writes per answer, with the fixed ids C1..Ck.
LOCAL_CLAIMS = 2


def claim_tuples(schema: dict[str, Any], k: int = LOCAL_CLAIMS) -> None:
    """A list of claims becomes a tuple of ``k`` claims with fixed ids (C1..Ck, or the prefix the id pattern
    names, such as B1..Bk for a bull thesis), and every list of claim ids an enum of those. A small model
    otherwise repeats an id (C23 twice) or writes claims until its budget runs out."""
    defs = schema.get("$defs", {})
    ids: list[str] | None = None
    for node in [schema, *defs.values()]:
        props = node.get("properties") or {}
        claims = props.get("claims")
        if isinstance(claims, dict) and claims.get("type") == "array":
            item = _item_def(claims, defs)
            if item is not None and "claim_id" in item.get("properties", {}):
                ids = [f"{_id_prefix(item['properties']['claim_id'])}{i}" for i in range(1, k + 1)]
                props["claims"] = {"type": "array", "minItems": k, "maxItems": k, "prefixItems": [
                    _fixed(item, "claim_id", {"const": c}) for c in ids]}
    for node in [schema, *defs.values()] if ids else []:
        props = node.get("properties") or {}
        if isinstance(props.get("supporting_claims"), dict):
            props["supporting_claims"] = {**props["supporting_claims"], "items": {"type": "string", "enum": ids}}


def _id_prefix(claim_id: dict[str, Any]) -> str:
    """The letters an id pattern such as ``^B[0-9]+$`` fixes; C (the paper's claim ids) otherwise."""
    found = re.fullmatch(r"\^([A-Za-z]+)\[0-9\]\+\$", claim_id.get("pattern", ""))
    return found.group(1) if found else "C"


#: Lists whose items are alternatives (a critique per peer, a response per critique received; see
#: ``madbench.debate.request_schemas.request_schema``). Other models may skip some; the local model answers each once.
ONE_EACH_LISTS = ("critiques", "critique_responses")


def one_each_tuples(schema: dict[str, Any]) -> None:
    """A one-each list (items ``anyOf`` its alternatives) becomes a tuple with every alternative once, in order."""
    for node in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in (node.get("properties") or {}).items():
            alternatives = ((prop or {}).get("items") or {}).get("anyOf") if isinstance(prop, dict) else None
            if name in ONE_EACH_LISTS and alternatives:
                node["properties"][name] = {"type": "array", "prefixItems": alternatives,
                                            "minItems": len(alternatives), "maxItems": len(alternatives)}
