"""Protocols: a protocol turns a RunContext into a final allocation, and declares the calls it makes.

Each is a ``Protocol`` subclass (``base``): its ``plan`` (the calls a run makes, as data: ``plan``), its ``run``,
its ``Options`` (a pydantic model of the knobs a debate config's ``options`` gives), its stage prompts and its
rule-based answers. ``registry`` finds one by name, import path or entry point.
"""

from __future__ import annotations

from madbench.debate.protocols.registry import load_protocol, protocol_named, protocol_of, protocol_options, protocol_plan

__all__ = ["load_protocol", "protocol_named", "protocol_of", "protocol_options", "protocol_plan"]
