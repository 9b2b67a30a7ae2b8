"""Reading YAML files and compiling prompt templates: the one way every config and prompt is loaded.

Templates compile in a sandboxed jinja2 environment with ``StrictUndefined``, and a template's variables
(found by parsing it) must match the ones its file declares, so a typo fails at load, never as a silently
degraded prompt.

Every render is bounded (``BoundedTemplate.render``): its output (the prompt) by ``MAX_PROMPT_CHARS`` and its
time by ``MAX_RENDER_S``, both checked as it goes (each loop iteration, call and output chunk), and string or
list growth (``*``, ``+``, ``~``, ``**``) is refused before it is allocated, so a runaway template fails with its
name instead of holding a worker for minutes. A sandbox violation is an ``InputError`` naming the template.
"""

from __future__ import annotations

import contextvars
import math
import os
import time
from pathlib import Path
from typing import Any, TypeVar

import jinja2
import yaml
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment
from jinja2.visitor import NodeTransformer
from pydantic import BaseModel, ConfigDict, ValidationError

from madbench_data.errors import InputError, format_validation_error

#: The most characters one render may produce: a prompt is one render. About 500k tokens, past most models'
#: context; a user who means more sets the environment variable (Ray workers started by the driver inherit it).
MAX_PROMPT_CHARS = 2_000_000
MAX_PROMPT_CHARS_ENV = "MADBENCH_MAX_PROMPT_CHARS"
#: The most seconds one render may take: a prompt renders in milliseconds, and a runaway loop that builds text
#: in a `{% set %}` block grows by some 100 MB a second until it is stopped.
MAX_RENDER_S = 2.0
MAX_RENDER_S_ENV = "MADBENCH_MAX_RENDER_S"
#: The largest integer power a template may compute, in bits (``10**6`` is 20 bits; ``10**10**10`` would hang).
MAX_POWER_BITS = 100_000
#: String methods whose integer argument is the size of what they allocate.
_PADDING = {"ljust", "rjust", "center", "zfill", "expandtabs"}
_LOOP_FILTER = "_madbench_bounded_loop"
_CONCAT_FILTER = "_madbench_bounded_concat"

_RENDER: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("madbench_render", default=None)


def _limit(name: str, default: float, kind: type) -> Any:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(name, f"{raw!r} is not a positive {kind.__name__}", f"unset it, or give e.g. {name}={default}")
    return value


def render_limits() -> tuple[int, float]:
    """(the most characters, the most seconds) one render may take: the defaults, or the environment's values."""
    return _limit(MAX_PROMPT_CHARS_ENV, MAX_PROMPT_CHARS, int), _limit(MAX_RENDER_S_ENV, MAX_RENDER_S, float)


class _Budget:
    """The limits of the render in progress, checked from inside the template as it runs."""

    def __init__(self, where: str):
        self.where = where
        self.max_chars, self.max_s = render_limits()
        self.deadline = time.monotonic() + self.max_s

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise InputError(self.where, f"the template took over {self.max_s:g} s to render (a runaway loop?)",
                             f"bound its loops, or set {MAX_RENDER_S_ENV} to a larger number of seconds if you mean it")

    def size(self, n: int) -> None:
        if n > self.max_chars:
            raise InputError(self.where, f"the template renders over {self.max_chars:,} characters, the limit for one "
                             "prompt (a runaway loop, or inputs too large for any model?)",
                             f"shorten the template or its inputs, or set {MAX_PROMPT_CHARS_ENV} to a larger number of "
                             "characters if you mean it")


def _budget() -> _Budget | None:
    return _RENDER.get()


def _bounded_loop(iterable: Any) -> Any:
    """Every ``{% for %}`` iterates through this: each iteration checks the render's time."""
    budget = _budget()
    if budget is None:
        return iterable

    def each():
        for item in iterable:
            budget.tick()
            yield item
    return each()


def _bounded_concat(value: Any) -> Any:
    """Every ``~`` result passes through this (it can at most double a string per step)."""
    budget = _budget()
    if budget is not None and isinstance(value, str):
        budget.size(len(value))
    return value


def _growth(op: str, left: Any, right: Any) -> int | None:
    """The size of ``left op right`` when it builds a sequence or a big integer, computed before building it."""
    seq = (str, list, tuple, bytes)
    if op == "*" and isinstance(left, int) and isinstance(right, seq):
        left, right = right, left
    if op == "*" and isinstance(left, seq) and isinstance(right, int):
        return len(left) * max(right, 0)
    if op == "+" and isinstance(left, seq) and isinstance(right, seq):
        return len(left) + len(right)
    if op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        bits = right * math.log2(abs(left))
        return None if bits <= MAX_POWER_BITS else -1
    return None


class BoundedEnvironment(SandboxedEnvironment):
    """The sandbox, with every loop, call, concatenation and sequence-building operator checked against the
    limits of the render in progress."""

    intercepted_binops = frozenset({"*", "+", "**"})

    def _parse(self, source, name, filename):
        return _Bound().visit(super()._parse(source, name, filename))

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.tick()
            n = _growth(op, left, right)
            if n == -1:
                raise InputError(budget.where, f"the template computes an integer power past {MAX_POWER_BITS:,} bits",
                                 "use smaller numbers")
            if n is not None:
                budget.size(n)
        return super().call_binop(context, op, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's own signature)
        budget = _budget()
        if budget is not None:
            budget.tick()
            if getattr(__obj, "__name__", None) in _PADDING and isinstance(getattr(__obj, "__self__", None), str):
                budget.size(max([len(__obj.__self__)] + [a for a in args if isinstance(a, int)]))
        return super().call(__context, __obj, *args, **kwargs)


class _Bound(NodeTransformer):
    """Every ``{% for %}`` iterates through ``_bounded_loop`` and every ``a ~ b`` passes through ``_bounded_concat``."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.iter.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(node, _CONCAT_FILTER, [], [], None, None, lineno=node.lineno)


def _bounded_padding(name: str, size: Any) -> Any:
    """jinja's ``center`` and ``indent`` filters, refusing a width that would build past the limit."""
    plain = ENV.filters[name]

    def bounded(value: Any, width: Any = 80 if name == "center" else 4, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if budget is not None and isinstance(width, int):
            budget.size(size(str(value), width))
        return plain(value, width, *args, **kwargs)
    return bounded


class BoundedTemplate(jinja2.Template):
    """A compiled template whose ``render`` is bounded, and which names its file and field in every error."""

    where = "template"

    def render(self, *args: Any, **kwargs: Any) -> str:
        budget = _Budget(self.where)
        token = _RENDER.set(budget)
        try:
            out, size = [], 0
            for chunk in self.generate(*args, **kwargs):
                size += len(chunk)
                budget.size(size)
                budget.tick()
                out.append(chunk)
            return "".join(out)
        except SecurityError as exc:
            raise InputError(self.where, f"unsafe template: {exc}", "use only the declared variables and their plain "
                             "values (no attributes starting with _, no Python internals)") from None
        except OverflowError as exc:  # the sandbox's range limit, or a number too large
            raise InputError(self.where, f"the template overflows: {exc}", "bound its loops and numbers") from None
        finally:
            _RENDER.reset(token)


# optimized=False: jinja's optimizer would evaluate constant expressions (a filter of a literal) at load, unbounded.
ENV = BoundedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True, optimized=False)
ENV.template_class = BoundedTemplate
ENV.filters[_LOOP_FILTER] = _bounded_loop
ENV.filters[_CONCAT_FILTER] = _bounded_concat
ENV.filters["center"] = _bounded_padding("center", lambda s, w: max(len(s), w))
ENV.filters["indent"] = _bounded_padding("indent", lambda s, w: len(s) + w * (s.count("\n") + 1))
del ENV.globals["lipsum"]  # one call writes any number of paragraphs, and no prompt needs placeholder text

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
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise InputError(path, f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} on line {line} is not valid UTF-8",
                         "save the file as UTF-8") from None
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


def compile_template(text: str, declared: set[str], where: str, allowed: set[str] | None = None) -> BoundedTemplate:
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
    template = ENV.from_string(text)
    template.where = where  # every render error names the file and field the template came from
    return template
