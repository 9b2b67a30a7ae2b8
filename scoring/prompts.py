"""Loading the scorer prompts (``configs/scoring/*.yaml``) with the same strict checks as role profiles."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, ConfigDict, ValidationError

from debate.profiles import _compile
from madbench_data.errors import InputError, format_validation_error
from madbench_data.paths import CONFIGS_DIR
from madbench_data.scenario import read_yaml

SCORING_DIR = CONFIGS_DIR / "scoring"


class PromptFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str
    variables: list[str]
    template: str


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
    try:
        spec = PromptFile.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), "fix the listed fields") from None
    template = _compile(spec.template, set(spec.variables), set(allowed), f"{path}: template")
    _compile(spec.system, set(), set(), f"{path}: system")
    digest = hashlib.sha256((spec.system + "\0" + spec.template).encode()).hexdigest()
    return ScorerPrompt(spec.system, frozenset(spec.variables), template, str(path), digest)
