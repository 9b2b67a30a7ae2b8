"""Role profiles: ordered system blocks per tier and a user template per phase, from YAML.

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

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from madbench_data.errors import InputError, format_validation_error
from madbench_data.paths import CONFIGS_DIR
from madbench_data.scenario import read_yaml

ROLES_DIR = CONFIGS_DIR / "roles"
TIERS = ("basic", "causal", "enriched")

#: What the engine supplies to each phase's template; a template may use any subset it declares.
PHASE_VARIABLES: dict[str, set[str]] = {
    "propose": {"memo", "universe", "constraints", "agent_id", "role", "round", "schema"},
    "critique": {"memo", "universe", "constraints", "agent_id", "role", "round", "peers", "tone", "schema"},
    "revise": {"memo", "universe", "constraints", "agent_id", "role", "round", "own", "critiques", "nudges", "schema"},
    "judge": {"memo", "universe", "constraints", "finals", "schema"},
}

_ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True,
                            trim_blocks=False)


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
    phases: dict[str, PhaseTemplate]


class RoleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    title: str
    blocks: dict[str, str]
    #: Optional per-phase overrides of the common templates.
    phases: dict[str, PhaseTemplate] = Field(default_factory=dict)


def _load(path: Path, model: type[BaseModel]):
    data = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), "fix the listed fields") from None


def _compile(text: str, declared: set[str], allowed: set[str], where: str) -> jinja2.Template:
    try:
        used = meta.find_undeclared_variables(_ENV.parse(text))
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(where, f"template syntax error at line {exc.lineno}: {exc.message}", "fix the jinja syntax") from None
    undeclared = sorted(used - declared)
    if undeclared:
        raise InputError(where, f"template uses undeclared variable(s): {', '.join(undeclared)}",
                         f"declare them under `variables` (available: {', '.join(sorted(allowed))}) or fix the spelling")
    unknown = sorted(declared - allowed)
    if unknown:
        raise InputError(where, f"declared variable(s) the engine does not supply: {', '.join(unknown)}",
                         f"use only: {', '.join(sorted(allowed))}")
    unused = sorted(declared - used)
    if unused:
        raise InputError(where, f"declared variable(s) not used by the template: {', '.join(unused)}",
                         "remove them from `variables` or use them")
    return _ENV.from_string(text)


@dataclass(frozen=True)
class Profile:
    role: str
    tier: str
    title: str
    system_blocks: tuple[tuple[str, str], ...]
    templates: dict[str, tuple[frozenset[str], jinja2.Template, str]]
    tones: tuple[Tone, ...]
    source: str

    @property
    def system(self) -> str:
        return "\n".join(text.strip() + "\n" for _, text in self.system_blocks).strip()

    def tone(self, beta: float) -> str:
        for t in self.tones:
            if beta <= t.up_to_beta + 1e-12:
                return t.text
        return self.tones[-1].text

    def render(self, phase: str, **variables: Any) -> str:
        if phase not in self.templates:
            raise KeyError(f"profile {self.role}/{self.tier} has no template for phase {phase!r}")
        declared, template, where = self.templates[phase]
        missing = sorted(declared - set(variables))
        if missing:
            raise RuntimeError(f"{where}: the engine did not supply {', '.join(missing)} (a bug, not a config error)")
        return template.render(**{k: variables[k] for k in declared})

    def content_hash(self) -> str:
        """Covers everything that shapes the prompts, for run identity: editing a template gives a new hash."""
        payload = {"system": self.system, "templates": {p: src for p, (_, _, src) in sorted(self.templates.items())},
                   "tones": [t.model_dump() for t in self.tones]}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


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
    common: CommonFile = _load(common_path, CommonFile)
    spec: RoleFile = _load(role_path, RoleFile)
    if spec.role != role:
        raise InputError(role_path, f"role: {spec.role!r} does not match the file name", f"set role: {role}")
    if tier not in common.tiers:
        raise InputError(common_path, f"tiers: no composition for tier {tier!r}", f"add tiers.{tier}")
    blocks = []
    for ref in common.tiers[tier]:
        origin, _, name = ref.partition(":")
        table, path = (spec.blocks, role_path) if origin == "role" else (common.blocks, common_path)
        if origin not in ("role", "common") or name not in table:
            raise InputError(path if origin in ("role", "common") else common_path,
                             f"tiers.{tier}: block {ref!r} not found", "define the block under `blocks` or fix the reference")
        _compile(table[name], set(), set(), f"{path}: blocks.{name}")  # system blocks take no variables
        blocks.append((name, table[name]))
    templates = {}
    for phase, allowed in PHASE_VARIABLES.items():
        pt = spec.phases.get(phase) or common.phases.get(phase)
        if pt is None:
            raise InputError(common_path, f"phases.{phase} is missing", "define a template for every phase")
        src = role_path if phase in spec.phases else common_path
        loc = f"{src}: phases.{phase}"
        templates[phase] = (frozenset(pt.variables), _compile(pt.template, set(pt.variables), allowed, loc), pt.template)
    tones = tuple(sorted(common.critique_tones, key=lambda t: t.up_to_beta))
    return Profile(role, tier, spec.title, tuple(blocks), templates, tones, str(role_path))


def available_roles(roles_dir: str | Path | None = None) -> list[str]:
    return sorted(p.stem for p in Path(roles_dir or ROLES_DIR).glob("*.yaml") if not p.stem.startswith("_") and p.stem != "judge")
