"""The run's one schema: alternatives under {"turn": …}, and what is not an envelope answer is fed back."""

import json

import pytest

from madbench.debate.envelope import ANSWER_IN, ENVELOPE_KEY, as_asked, envelope_schema, unwrap
from madbench.gateway.errors import OutputInvalid


def test_an_envelope_answer_is_unwrapped_and_anything_else_is_feedback():
    assert json.loads(unwrap('{"turn": {"thesis": "x"}}')) == {"thesis": "x"}
    with pytest.raises(OutputInvalid, match="not valid JSON"):
        unwrap("Sure! {")
    with pytest.raises(OutputInvalid, match=r'\{"turn": \{\.\.\.\}\}.*got an object with the key\(s\) "thesis"'):
        unwrap('{"thesis": "x"}')  # the phase's answer without its envelope
    with pytest.raises(OutputInvalid, match="got a JSON array"):
        unwrap("[1]")
    with pytest.raises(OutputInvalid, match='got a "turn" that is a JSON string, not an object'):
        unwrap('{"turn": "x"}')


def test_alternatives_keep_their_own_definitions_when_two_share_a_name():
    a = {"title": "A", "properties": {"x": {"$ref": "#/$defs/Item"}}, "$defs": {"Item": {"type": "string"}}}
    b = {"title": "B", "properties": {"y": {"$ref": "#/$defs/Item"}}, "$defs": {"Item": {"type": "number"}}}
    schema = envelope_schema([a, b, a])
    options = schema["properties"][ENVELOPE_KEY]["anyOf"]
    defs = schema["$defs"]
    assert defs[options[0]["properties"]["x"]["$ref"].split("/")[-1]] == {"type": "string"}
    assert defs[options[1]["properties"]["y"]["$ref"].split("/")[-1]] == {"type": "number"}
    assert len(defs) == 2  # the same definition twice is kept once


def test_the_simulators_wrap_only_what_the_task_asks_and_leave_garbage_alone():
    asked = {ANSWER_IN: ENVELOPE_KEY}
    assert json.loads(as_asked(asked, '{"a": 1}')) == {ENVELOPE_KEY: {"a": 1}}
    assert as_asked({}, '{"a": 1}') == '{"a": 1}' and as_asked(asked, "not json") == "not json"
