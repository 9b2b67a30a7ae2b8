"""Role profiles: ordered instruction blocks per tier, the shared context and a template per phase, from YAML.

A turn's prompt is two messages, ordered for providers' prompt caches (a cache serves the longest prefix it has
seen before): the system message is the tier's common blocks and the shared context (task, universe,
constraints, memo), byte-identical for every agent, phase and round of a run and for its judge on the same tier;
the user message holds what varies, the role's own blocks and then the phase's template (agent, round, peers,
critiques, output outline).

Templates are compiled in a sandboxed jinja2 environment with StrictUndefined.
At load time every template's variables (found by parsing it) must match its
declaration exactly and be ones the engine supplies for that phase, so a typo
or a missing variable is an error before any model is called, never a
silently degraded prompt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from madbench.data.errors import InputError
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import BoundedTemplate, compile_template, load_yaml_model

ROLES_DIR = CONFIGS_DIR / "roles"
TIERS = ("basic", "causal", "enriched")

#: What the engine supplies to each phase's template; a template may use any subset it declares.
PHASE_VARIABLES: dict[str, set[str]] = {
    "propose": {"memo", "universe", "constraints", "agent_id", "role", "round", "schema"},
    "critique": {"memo", "universe", "constraints", "agent_id", "role", "round", "peers", "tone", "schema"},
    "revise": {"memo", "universe", "constraints", "agent_id", "role", "round", "own", "critiques", "nudges", "schema"},
    "judge": {"memo", "universe", "constraints", "finals", "schema"},
}
#: What the shared context (the system message's tail) may use: only what is the same for every agent of a run.
CONTEXT_VARIABLES = {"memo", "universe", "constraints"}

class PhaseTemplate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variables: list[str]
    template: str


class Tone(BaseModel):
    model_config = ConfigDict(extra="forbid")
    up_to_beta: float = Field(ge=0, le=1)
    text: str


class CommonFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    blocks: dict[str, str]
    tiers: dict[str, list[str]]
    critique_tones: list[Tone] = Field(min_length=1)
    #: The shared context after the common blocks: the same for every agent and phase (roles cannot override it).
    context: PhaseTemplate
    phases: dict[str, PhaseTemplate]


class RoleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    title: str
    blocks: dict[str, str]
    #: Optional per-phase overrides of the common templates.
    phases: dict[str, PhaseTemplate] = Field(default_factory=dict)


Template = tuple[frozenset[str], BoundedTemplate, str]


def _join(blocks: tuple[tuple[str, str], ...]) -> str:
    return "\n".join(text.strip() + "\n" for _, text in blocks).strip()


@dataclass(frozen=True)
class Profile:
    role: str
    tier: str
    title: str
    #: The tier's blocks from _common.yaml (in tier order): the same for every role, so they open the shared prefix.
    shared_blocks: tuple[tuple[str, str], ...]
    #: The tier's blocks from the role's file (identity, method, pitfalls): they open the user message.
    role_blocks: tuple[tuple[str, str], ...]
    context: Template
    templates: dict[str, Template]
    tones: tuple[Tone, ...]
    source: str

    @property
    def system_blocks(self) -> tuple[tuple[str, str], ...]:
        return self.shared_blocks + self.role_blocks

    @property
    def system(self) -> str:
        """Every instruction block of the profile (shared, then the role's), as one text."""
        return _join(self.system_blocks)

    @property
    def shared_system(self) -> str:
        return _join(self.shared_blocks)

    @property
    def role_text(self) -> str:
        return _join(self.role_blocks)

    def tone(self, beta: float) -> str:
        for t in self.tones:
            if beta <= t.up_to_beta + 1e-12:
                return t.text
        return self.tones[-1].text

    def render(self, phase: str, **variables: Any) -> str:
        """The phase's template alone."""
        if phase not in self.templates:
            raise KeyError(f"profile {self.role}/{self.tier} has no template for phase {phase!r}")
        return _render(self.templates[phase], variables)

    def render_context(self, **variables: Any) -> str:
        """The system message: the common blocks, then the shared context (memo, universe, constraints)."""
        return self.shared_system + "\n\n" + _render(self.context, variables)

    def user_prompt(self, phase: str, **variables: Any) -> str:
        """The user message: the role's blocks, then the phase's template."""
        return (self.role_text + "\n\n" if self.role_blocks else "") + self.render(phase, **variables)

    def content_hash(self) -> str:
        """Covers everything that shapes the prompts, for run identity: editing a template gives a new hash."""
        payload = {"shared": self.shared_system, "role": self.role_text, "context": self.context[2],
                   "templates": {p: src for p, (_, _, src) in sorted(self.templates.items())},
                   "tones": [t.model_dump() for t in self.tones]}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _render(template: Template, variables: dict[str, Any]) -> str:
    declared, compiled, _ = template
    missing = sorted(declared - set(variables))
    if missing:
        raise RuntimeError(f"{compiled.where}: the engine did not supply {', '.join(missing)} (a bug, not a config error)")
    return compiled.render(**{k: variables[k] for k in declared})


def load_profile(role: str, tier: str, roles_dir: str | Path | None = None, where: str = "config") -> Profile:
    return _load_profile(role, tier, str(Path(roles_dir or ROLES_DIR)), where)


@lru_cache(maxsize=256)
def _load_profile(role: str, tier: str, roles_dir: str, where: str) -> Profile:
    base = Path(roles_dir)
    if tier not in TIERS:
        raise InputError(where, f"unknown tier {tier!r}", f"use one of: {', '.join(TIERS)}")
    role_path = base / f"{role}.yaml"
    if not role_path.is_file():
        known = sorted(p.stem for p in base.glob("*.yaml") if not p.stem.startswith("_"))
        raise InputError(where, f"unknown role {role!r} (no {role_path})", f"use one of: {', '.join(known)}")
    common_path = base / "_common.yaml"
    common: CommonFile = load_yaml_model(common_path, CommonFile)
    spec: RoleFile = load_yaml_model(role_path, RoleFile)
    if spec.role != role:
        raise InputError(role_path, f"role: {spec.role!r} does not match the file name", f"set role: {role}")
    if tier not in common.tiers:
        raise InputError(common_path, f"tiers: no composition for tier {tier!r}", f"add tiers.{tier}")
    blocks: dict[str, list[tuple[str, str]]] = {"common": [], "role": []}
    for ref in common.tiers[tier]:
        origin, _, name = ref.partition(":")
        table, path = (spec.blocks, role_path) if origin == "role" else (common.blocks, common_path)
        if origin not in ("role", "common") or name not in table:
            raise InputError(path if origin in ("role", "common") else common_path,
                             f"tiers.{tier}: block {ref!r} not found", "define the block under `blocks` or fix the reference")
        compile_template(table[name], set(), f"{path}: blocks.{name}", set())  # system blocks take no variables
        blocks[origin].append((name, table[name]))
    templates = {}
    for phase, allowed in PHASE_VARIABLES.items():
        pt = spec.phases.get(phase) or common.phases.get(phase)
        if pt is None:
            raise InputError(common_path, f"phases.{phase} is missing", "define a template for every phase")
        src = role_path if phase in spec.phases else common_path
        templates[phase] = _compiled(pt, f"{src}: phases.{phase}", allowed)
    tones = tuple(sorted(common.critique_tones, key=lambda t: t.up_to_beta))
    context = _compiled(common.context, f"{common_path}: context", CONTEXT_VARIABLES)
    return Profile(role, tier, spec.title, tuple(blocks["common"]), tuple(blocks["role"]), context, templates, tones,
                   str(role_path))


def _compiled(pt: PhaseTemplate, where: str, allowed: set[str]) -> Template:
    return frozenset(pt.variables), compile_template(pt.template, set(pt.variables), where, allowed), pt.template
