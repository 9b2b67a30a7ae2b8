"""Loading the scorer prompts (``configs/scoring/*.yaml``) with the same strict checks as role profiles."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from madbench.data.errors import InputError
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import PromptSpec, compile_template, load_yaml_model

SCORING_DIR = CONFIGS_DIR / "scoring"


@dataclass(frozen=True)
class ScorerPrompt:
    system: str
    variables: frozenset[str]
    template: jinja2.Template
    source: str
    digest: str

    def render(self, **variables: Any) -> str:
        return self.template.render(**{k: variables[k] for k in self.variables})


@lru_cache(maxsize=16)
def load_scorer_prompt(name: str, allowed: frozenset[str], directory: str | None = None) -> ScorerPrompt:
    path = Path(directory or SCORING_DIR) / f"{name}.yaml"
    if not path.is_file():
        raise InputError(path, "scorer prompt not found", "restore it from the repository")
    spec = load_yaml_model(path, PromptSpec)
    template = compile_template(spec.template, set(spec.variables), f"{path}: template", set(allowed))
    compile_template(spec.system, set(), f"{path}: system", set())
    digest = hashlib.sha256((spec.system + "\0" + spec.template).encode()).hexdigest()
    return ScorerPrompt(spec.system, frozenset(spec.variables), template, str(path), digest)
