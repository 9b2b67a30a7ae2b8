"""One schema for every turn of a run: the phases' answers as alternatives inside ``{"turn": …}``.

Hosted providers put the structured-output schema at the head of their prompt cache (OpenAI before the system
message, Anthropic's tools before it), so a request with another schema shares none of the memo behind it. A run
whose propose, critique, revise and judge turns all send this one envelope sends the same bytes before the memo
on every call, and every call after the first is served the memo from the provider's cache. The answer is the
phase's object under ``turn``; ``unwrap`` takes it out before validation, which checks it against the phase's own
model exactly as before. The agent is told the phase in its prompt (and shown the envelope there), and an answer
of another phase's shape fails validation and is retried with that feedback.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from madbench.debate.validation import decode_answer
from madbench.gateway.errors import OutputInvalid

#: The one property of the envelope, holding the phase's answer.
ENVELOPE_KEY = "turn"


def envelope_schema(alternatives: list[dict[str, Any]], title: str = "DebateTurn") -> dict[str, Any]:
    """``{"turn": anyOf[alternatives]}`` with the alternatives' ``$defs`` merged (a name two alternatives define
    differently is kept apart under a numbered name)."""
    defs: dict[str, Any] = {}
    options = []
    for i, alt in enumerate(alternatives):
        alt = copy.deepcopy(alt)
        renames = {}
        for name, body in alt.pop("$defs", {}).items():
            merged = name if defs.get(name, body) == body else f"{name}{i}"
            renames[name] = merged
            defs[merged] = body
        options.append(alt)
        if any(old != new for old, new in renames.items()):
            _rename_refs([alt, *(defs[n] for n in renames.values())], renames)
    schema = {"type": "object", "title": title, "properties": {ENVELOPE_KEY: {"anyOf": options}},
              "required": [ENVELOPE_KEY], "additionalProperties": False}
    return {**schema, "$defs": defs} if defs else schema


def _rename_refs(nodes: list[Any], renames: dict[str, str]) -> None:
    for node in nodes:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renames:
                node["$ref"] = f"#/$defs/{renames[ref[8:]]}"
            _rename_refs(list(node.values()), renames)
        elif isinstance(node, list):
            _rename_refs(node, renames)


def envelope_outline(outline: str) -> str:
    """The prompt's outline of the answer, inside the envelope."""
    return f'{{"{ENVELOPE_KEY}": {outline}}}'


def unwrap(content: str) -> str:
    """The phase's answer inside an envelope answer; anything else is invalid output, fed back for a retry."""
    value = decode_answer(content)
    if not isinstance(value, dict) or set(value) != {ENVELOPE_KEY} or not isinstance(value[ENVELOPE_KEY], dict):
        if not isinstance(value, dict):
            got = f"a JSON {_json_kind(value)}"
        elif set(value) != {ENVELOPE_KEY}:
            got = "an object with the key(s) " + ", ".join(json.dumps(k) for k in sorted(value)) if value else "{}"
        else:
            got = f'a "{ENVELOPE_KEY}" that is a JSON {_json_kind(value[ENVELOPE_KEY])}, not an object'
        raise OutputInvalid(f'the answer must be one JSON object {{"{ENVELOPE_KEY}": {{...}}}} holding this phase\'s answer; '
                            f"got {got}")
    return json.dumps(value[ENVELOPE_KEY])


def _json_kind(value: object) -> str:
    """JSON's name for the kind of a decoded value."""
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


#: The key of a request's task context (``madbench_context``, read by madbench's simulated providers only) that
#: says the answer goes inside the envelope.
ANSWER_IN = "answer_in"


def as_asked(context: dict[str, Any] | None, content: str) -> str:
    """An answer as the request's task asks for it: inside the envelope when its context says so (the simulated
    providers' side of ``unwrap``). Text that is not JSON (a fault a test injects) is left as it is."""
    if not context or context.get(ANSWER_IN) != ENVELOPE_KEY:
        return content
    try:
        return json.dumps({ENVELOPE_KEY: json.loads(content)})
    except json.JSONDecodeError:
        return content
