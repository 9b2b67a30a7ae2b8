"""Reading YAML files and compiling prompt templates: the one way every config and prompt is loaded.

Templates compile in a sandboxed jinja2 environment with ``StrictUndefined``, and a template's variables
(found by parsing it) must match the ones its file declares, so a typo fails at load, never as a silently
degraded prompt.

Every render is bounded (``BoundedTemplate.render``): its output (the prompt) by ``MAX_PROMPT_CHARS`` and its
time by ``MAX_RENDER_S``, both checked as it goes (each loop iteration, call and output chunk), so a runaway
template fails with its name instead of holding a worker for minutes. Whatever builds a large string or list from
small inputs is sized before it is built and refused over ``MAX_PROMPT_CHARS``: the operators ``*``, ``+``, ``~``,
``**`` and ``%``; the filters that pad, wrap, replace, join, format, escape or serialise (``_FILTER_SIZES``); the
string and list methods that do (``_METHOD_SIZES``, ``str.format`` included); and every value written out, set
blocks and macros included (``OUTPUT_FACTOR`` times the limit in all). A sandbox violation is an ``InputError``
naming the template.

Nothing is evaluated at compile time. jinja folds constant expressions as it generates a template's code even with
its optimizer off (``{{ 'x'|center(900000000) }}`` would be built inside ``compile_template``, outside any render's
limits); it folds no intercepted operator, no filter that takes the context, and no output at all when ``finalize``
takes the context, which is how every bounded one here is made.
"""

from __future__ import annotations

import contextvars
import math
import os
import re
import string
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import jinja2
import yaml
from jinja2 import meta, nodes, pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace, _PassArg
from jinja2.visitor import NodeTransformer
from pydantic import BaseModel, ConfigDict, ValidationError

from madbench.data.errors import InputError, format_validation_error

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
#: Everything one render writes out (set blocks and macro bodies included) is at most this many times the prompt
#: limit: room for a template that builds a section in a `{% set %}` block and then writes it.
OUTPUT_FACTOR = 4
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
        self.written = 0

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

    def write(self, n: int) -> None:
        """``n`` more characters written out, anywhere (the prompt, a set block, a macro's body)."""
        self.written += n
        if self.written > OUTPUT_FACTOR * self.max_chars:
            raise InputError(self.where, f"the template writes over {OUTPUT_FACTOR * self.max_chars:,} characters in all "
                             f"(set blocks and macros included: {OUTPUT_FACTOR} times the limit for one prompt; a runaway "
                             "loop?)", f"bound its loops, or set {MAX_PROMPT_CHARS_ENV} to a larger number of characters "
                             "if you mean it")


def _budget() -> _Budget | None:
    return _RENDER.get()


def _bounded_loop(iterable: Any) -> Any:
    """Every ``{% for %}`` iterates through this: each iteration checks the render's time."""
    budget = _budget()
    if budget is None:
        return iterable

    def each() -> Iterator[Any]:
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


def _growth(op: str, left: Any, right: Any, cap: int) -> int | None:
    """The size of ``left op right`` when it builds a sequence, a formatted string or a big integer, computed before
    building it; None when it builds none of these."""
    seq = (str, list, tuple, bytes)
    if op == "*" and isinstance(left, int) and isinstance(right, seq):
        left, right = right, left
    if op == "*" and isinstance(left, seq) and isinstance(right, int):
        return len(left) * max(right, 0)
    if op == "+" and isinstance(left, seq) and isinstance(right, seq):
        return len(left) + len(right)
    if op == "%" and isinstance(left, (str, bytes)):
        return _percent_size(left, right, cap)
    if op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        bits = right * math.log2(abs(left))
        return None if bits <= MAX_POWER_BITS else -1
    return None


# -- sizes computed before building: every bound is an upper bound on characters (or, for lists, items)


def _text_size(value: Any, cap: int) -> int:
    """An upper bound on the characters of ``str(value)`` (a container's text holds its items' texts), counted without
    building it; counting stops once past ``cap``. Escapes (``repr``, JSON) can add a small factor, which the checks
    on what is written out bound in turn."""
    total, todo = 0, [value]
    while todo and total <= cap:
        v = todo.pop()
        if isinstance(v, (str, bytes)):
            total += len(v) + 2
        elif isinstance(v, (list, tuple, set, frozenset, dict)):
            total += 2 + 4 * len(v)
            if total <= cap:
                todo.extend(v.items() if isinstance(v, dict) else v)
        elif isinstance(v, Namespace):  # prints as its attributes
            todo.append(object.__getattribute__(v, "_Namespace__attrs"))
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 2
        else:  # a float, None, a bool, an object's short repr
            total += 32
    return total


def _number(x: Any, cap: int) -> int:
    """A width, precision or count as given (an int, or a field's digits); a string counts its length (an indent)."""
    if isinstance(x, bool) or x is None:
        return 0
    if isinstance(x, int):
        return abs(x)
    if isinstance(x, str) and x.isdigit():
        return int(x) if len(x) < 19 else cap + 1  # digits past any real width (and past int()'s digit limit)
    return len(x) if isinstance(x, str) else 0


_PERCENT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?[hlL]?(?P<conv>.)", re.S)
_SPEC = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<prec>\d+))?")


def _percent_size(fmt: str | bytes, args: Any, cap: int) -> int:
    """An upper bound on the length of ``fmt % args``: its text, plus each conversion's width, precision and value."""
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    values = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, Mapping) else None
    total, i = len(text), 0
    for m in _PERCENT.finditer(text):
        if m["conv"] == "%":
            continue
        taken = [m["width"] == "*", m["prec"] == "*", not (mapping is not None and m["key"] is not None)]
        got = values[i:i + sum(taken)]
        i += sum(taken)
        width = _number(got.pop(0) if taken[0] and got else m["width"], cap)
        prec = _number(got.pop(0) if taken[1] and got else m["prec"], cap)
        value = mapping.get(m["key"]) if mapping is not None and not taken[2] else got[0] if got else None
        total += width + prec + _text_size(value, cap)
        if total > cap:
            break
    return total


def _format_size(fmt: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], cap: int) -> int:
    """An upper bound on the length of ``fmt.format(*args, **kwargs)``: its text, plus each field's width, precision
    and value. A nested width or precision (``{:>{w}}``) is taken as the largest number among the arguments."""
    numbers = [abs(v) for v in (*args, *kwargs.values()) if isinstance(v, int) and not isinstance(v, bool)]
    total, auto = 0, 0
    for literal, field, spec, _ in string.Formatter().parse(fmt):
        total += len(literal)
        if field is None:
            continue
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if root == "":
            value, auto = (args[auto] if auto < len(args) else None), auto + 1
        else:
            value = args[int(root)] if root.isdigit() and int(root) < len(args) else kwargs.get(root)
        if "{" in (spec or ""):
            width = prec = max(numbers, default=0)
        else:
            m = _SPEC.match(spec or "")
            assert m is not None  # every part of _SPEC is optional: it matches any spec
            width, prec = _number(m["width"], cap), _number(m["prec"], cap)
        total += width + prec + _text_size(value, cap)
        if total > cap:
            break
    return total


def _replace_size(s: Any, old: Any, new: Any, count: Any, cap: int) -> int:
    """The exact length of ``s.replace(old, new, count)``: len(s) + n·(len(new) − len(old)), n the replacements made."""
    if not isinstance(s, (str, bytes)):
        return _text_size(s, cap) * max(1, _text_size(new, cap))  # converted to text first (the filter): a bound
    old = old if isinstance(old, type(s)) else str(old)
    new_len = len(new) if isinstance(new, (str, bytes)) else _text_size(new, cap)
    n = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * max(0, new_len - len(old))


def _lines(s: Any, cap: int) -> int:
    return s.count("\n") + 1 if isinstance(s, str) else _text_size(s, cap)


def _escape_size(s: Any, cap: int) -> int:
    """HTML escaping: ``&``, ``"`` and ``'`` become 5 characters, ``<`` and ``>`` 4."""
    if not isinstance(s, str):
        return 6 * _text_size(s, cap)
    return len(s) + 4 * (s.count("&") + s.count('"') + s.count("'")) + 3 * (s.count("<") + s.count(">"))


#: The size of each jinja filter's result that can be much larger than its input, from the filter's own arguments
#: (``cap`` first, then the value: a list, for the filters in ``_MATERIALISED``). Filters missing here return at
#: most a small multiple of their input, or less.
_FILTER_SIZES: dict[str, Callable[..., int]] = {
    "center": lambda cap, v, width=80: max(_text_size(v, cap), _number(width, cap)),
    "indent": lambda cap, v, width=4, first=False, blank=False: _text_size(v, cap) + _number(width, cap) * _lines(v, cap),
    "format": lambda cap, v, *a, **kw: _percent_size(v, kw or a, cap) if isinstance(v, str) else _text_size((v, a, kw), cap),
    "wordwrap": lambda cap, s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True: (
        _text_size(s, cap) + (_text_size(s, cap) // max(1, _number(width, cap)) + _lines(s, cap)) * _number(wrapstring or "\n", cap)),
    "truncate": lambda cap, s, length=255, killwords=False, end="...", leeway=None: _text_size(s, cap) + _text_size(end, cap),
    "replace": lambda cap, s, old, new, count=None: _replace_size(s, old, new, count, cap),
    "join": lambda cap, items, d="", attribute=None: _text_size(items, cap) + _text_size(d, cap) * max(0, len(items) - 1),
    "batch": lambda cap, items, linecount, fill_with=None: len(items) + _number(linecount, cap),
    "slice": lambda cap, items, slices, fill_with=None: len(items) + _number(slices, cap),
    "sum": lambda cap, items, attribute=None, start=0: (
        _text_size(items, cap) + _text_size(start, cap) if isinstance(start, (str, bytes, list, tuple)) else 0),
    "string": lambda cap, v: _text_size(v, cap),
    "tojson": lambda cap, v, indent=None: _text_size(v, cap) * (1 + _number(indent, cap)),
    "pprint": lambda cap, v: 2 * _text_size(v, cap),
    "escape": lambda cap, v: _escape_size(v, cap),
    "e": lambda cap, v: _escape_size(v, cap),
    "forceescape": lambda cap, v: _escape_size(v, cap),
    "xmlattr": lambda cap, d, autospace=True: 6 * _text_size(d, cap),
    "urlencode": lambda cap, v: 12 * _text_size(v, cap),  # %XX per UTF-8 byte: at most 12 characters a character
    "urlize": lambda cap, v, trim_url_limit=None, nofollow=False, target=None, rel=None, extra_schemes=None: (
        3 * _text_size(v, cap) + _lines(str(v).replace(" ", "\n") if isinstance(v, str) else v, cap)
        * (_text_size(target, cap) + _text_size(rel, cap) + 64)),
}
#: Filters that iterate their value once: it is made a list first (a generator from ``map`` too), so it can be sized.
_MATERIALISED = {"join", "batch", "slice", "sum"}

#: The size of what a str, bytes or list method builds, from ``(cap, self, *args)``: those that can build far more
#: than they are given. ``join`` and ``extend`` see their iterable as a list (``_bounded_method`` makes it one).
_METHOD_SIZES: dict[str, Callable[..., int]] = {
    **{name: lambda cap, s, width, *rest: max(len(s), _number(width, cap)) for name in ("ljust", "rjust", "center", "zfill")},
    "expandtabs": lambda cap, s, tabsize=8: len(s) + s.count("\t" if isinstance(s, str) else b"\t") * _number(tabsize, cap),
    "replace": lambda cap, s, old, new, count=-1: _replace_size(s, old, new, count, cap),
    "join": lambda cap, s, items: _text_size(items, cap) + len(s) * max(0, len(items) - 1),
    "translate": lambda cap, s, table, *rest: len(s) * max(
        [1] + [_text_size(v, cap) for v in table.values()] if isinstance(table, Mapping) else [1]),
    "format": lambda cap, s, *args, **kwargs: _format_size(s, args, kwargs, cap) if isinstance(s, str) else len(s),
    "format_map": lambda cap, s, mapping: _format_size(s, (), mapping, cap) if isinstance(s, str) else len(s),
    "extend": lambda cap, s, items: len(s) + len(items),
}


def _bounded_method(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any], budget: _Budget) -> tuple[Any, ...]:
    """Check the size of what the bound method ``obj`` will build (``_METHOD_SIZES``); the arguments to call it with."""
    method = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format and str.format_map (update_wrapper)
    owner, name = getattr(method, "__self__", None), getattr(method, "__name__", None)
    if name not in _METHOD_SIZES or not isinstance(owner, (str, bytes, list)) or isinstance(owner, list) != (name == "extend"):
        return args
    if name in ("join", "extend") and args:
        args = (list(args[0]), *args[1:])  # a generator is consumed once: sized and then used as this list
    given = {k: v for k, v in kwargs.items() if k not in ("_loop_vars", "_block_vars")}  # jinja's own, for Context.call
    budget.size(_METHOD_SIZES[name](budget.max_chars, owner, *args, **given))
    return args


def _sized_filter(name: str) -> Callable[..., Any]:
    """jinja's filter ``name``, refusing a result over the limit (``_FILTER_SIZES``) before building it. It takes the
    context, so jinja never folds it at compile time (see the module's docstring)."""
    plain: Callable[..., Any] = ENV.filters[name]
    leads: dict[_PassArg | None, Callable[[Context], list[Any]]] = {
        None: lambda c: [], _PassArg.context: lambda c: [c], _PassArg.eval_context: lambda c: [c.eval_ctx],
        _PassArg.environment: lambda c: [c.environment]}
    lead = leads[_PassArg.from_obj(plain)]

    @pass_context
    def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.tick()
            if name in _MATERIALISED:
                value = list(value)
            budget.size(_FILTER_SIZES[name](budget.max_chars, value, *args, **kwargs))
        return plain(*lead(context), value, *args, **kwargs)
    return bounded


@pass_context
def _finalize(context: Context, value: Any) -> Any:
    """Every value written out (``{{ … }}``, in the prompt, a set block or a macro) counts towards the render's total,
    sized before it is made text. Taking the context, it also keeps jinja from rendering any output at compile time."""
    budget = _budget()
    if budget is not None:
        budget.write(len(value) if isinstance(value, str) else _text_size(value, OUTPUT_FACTOR * budget.max_chars))
    return value


class BoundedEnvironment(SandboxedEnvironment):
    """The sandbox, with every loop, call, concatenation and sequence-building operator checked against the
    limits of the render in progress."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})  # intercepted operators are never folded at compile time

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        _Bound().visit(tree)  # rewrites the tree in place
        return tree

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.tick()
            n = _growth(op, left, right, budget.max_chars)
            if n == -1:
                raise InputError(budget.where, f"the template computes an integer power past {MAX_POWER_BITS:,} bits",
                                 "use smaller numbers")
            if n is not None:
                budget.size(n)
        return super().call_binop(context, op, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's own signature)
        budget = _budget()
        if budget is not None:
            budget.tick()
            args = _bounded_method(__obj, args, kwargs, budget)
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


# optimized=False: jinja's optimizer would evaluate constant expressions (a filter of a literal) at load, unbounded;
# the code generator's own folding of output is off because finalize takes the context (the module's docstring).
ENV = BoundedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True, optimized=False,
                         finalize=_finalize)
ENV.template_class = BoundedTemplate
ENV.filters[_LOOP_FILTER] = _bounded_loop
ENV.filters[_CONCAT_FILTER] = _bounded_concat
for _name in _FILTER_SIZES:
    ENV.filters[_name] = _sized_filter(_name)
del ENV.globals["lipsum"]  # one call writes any number of paragraphs, and no prompt needs placeholder text

Model = TypeVar("Model", bound=BaseModel)


class PromptSpec(BaseModel):
    """A system text and a template with the variables it declares (scorer prompts, protocol stages)."""
    model_config = ConfigDict(extra="forbid")
    system: str
    variables: list[str]
    template: str


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that names one key twice."""


#: libyaml's parser where PyYAML was built with it (several times faster: every run reads its configs and rubric),
#: with the same safe constructor.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe YAML loader that refuses a mapping naming one key twice: PyYAML keeps the last silently, so a
    ``workers: 2`` written below ``workers: 1`` would win unseen."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base loader reports it
                    continue
                if first is not None:
                    raise DuplicateKey(
                        None, None, f"duplicate key {key!r} (first on line {first})", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def parse_yaml(text: str) -> object:
    """YAML text as Python data through the one loader madbench uses (duplicate keys refused); ``yaml.YAMLError``
    for malformed text, which ``read_yaml`` turns into one line."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: Path) -> object:
    """Parse a YAML file, turning parser errors (and a key given twice in one mapping) into one clear line."""
    if path.is_dir():
        raise InputError(path, "is a directory, not a YAML file", "give the path of a .yaml file")
    if not path.is_file():
        raise InputError(path, "file not found", "check the path")
    try:
        return parse_yaml(path.read_text(encoding="utf-8"))
    except PermissionError:
        raise InputError(path, "not readable by this user", f"make it readable (chmod u+r {path})") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise InputError(path, f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} on line {line} is not valid UTF-8",
                         "save the file as UTF-8") from None
    except DuplicateKey as exc:
        mark = exc.problem_mark
        raise InputError(path, f"line {mark.line + 1 if mark else '?'}: {exc.problem}",
                         "keep one of the two entries (YAML would silently keep the last)") from None
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
    template = cast(BoundedTemplate, ENV.from_string(text))  # ENV.template_class
    template.where = where  # every render error names the file and field the template came from
    return template
