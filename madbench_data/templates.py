"""Reading YAML files and compiling prompt templates: the one way every config and prompt is loaded.

Templates compile in a sandboxed jinja2 environment with ``StrictUndefined``, and a template's variables
(found by parsing it) must match the ones its file declares, so a typo fails at load, never as a silently
degraded prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import jinja2
import yaml
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, ValidationError

from madbench_data.errors import InputError, format_validation_error

ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)

Model = TypeVar("Model", bound=BaseModel)


class PromptSpec(BaseModel):
    """A system text and a template with the variables it declares (scorer prompts, protocol stages)."""
    model_config = ConfigDict(extra="forbid")
    system: str
    variables: list[str]
    template: str


def read_yaml(path: Path) -> object:
    """Parse a YAML file, turning parser errors into one clear line."""
    if not path.is_file():
        raise InputError(path, "file not found", "check the path")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"malformed YAML{at}: {problem}", "fix the YAML syntax") from None


def load_yaml_model(path: Path, model: type[Model]) -> Model:
    """A YAML file validated against ``model``; every problem is named with its field."""
    data = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), "fix the listed fields") from None


def compile_template(text: str, declared: set[str], where: str, allowed: set[str] | None = None) -> jinja2.Template:
    """Compile ``text``; it must use exactly the ``declared`` variables, all of them among ``allowed`` when given."""
    try:
        used = meta.find_undeclared_variables(ENV.parse(text))
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(where, f"template syntax error at line {exc.lineno}: {exc.message}", "fix the jinja syntax") from None
    undeclared = sorted(used - declared)
    if undeclared:
        available = f" (available: {', '.join(sorted(allowed))})" if allowed is not None else ""
        raise InputError(where, f"template uses undeclared variable(s): {', '.join(undeclared)}",
                         f"declare them under `variables`{available} or fix the spelling")
    if allowed is not None:
        unknown = sorted(declared - allowed)
        if unknown:
            raise InputError(where, f"declared variable(s) the engine does not supply: {', '.join(unknown)}",
                             f"use only: {', '.join(sorted(allowed))}")
        unused = sorted(declared - used)
        if unused:
            raise InputError(where, f"declared variable(s) not used by the template: {', '.join(unused)}",
                             "remove them from `variables` or use them")
    return ENV.from_string(text)
