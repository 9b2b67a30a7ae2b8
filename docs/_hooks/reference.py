"""MkDocs hook: the Reference pages, generated from the code at every build so that they cannot drift.

* ``reference/cli.md``: every `madbench` command and option, from the argparse parser (``build_parser``);
* ``reference/python-api.md``: the public names of ``madbench.__all__``, from their signatures and docstrings;
* ``reference/batch-and-config.md``: the fields of a batch file and a debate config, from their pydantic models
  (types and defaults from the fields, descriptions from the ``#:`` comments above them);
* ``reference/tables.md``: the columns of the results directory's Parquet tables, from their declared schemas.

None of these files exists in the repository: ``on_files`` adds them to the build. The ``page_*`` functions are plain
functions of the code, so a test can call them without MkDocs.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import PydanticUndefined

GENERATED: dict[str, str] = {
    "reference/cli.md": "page_cli",
    "reference/python-api.md": "page_python_api",
    "reference/batch-and-config.md": "page_config",
    "reference/tables.md": "page_tables",
}


def escape(text: str) -> str:
    """Markdown-safe prose from help and docstrings: ``<batch>`` is no HTML tag and ``*`` no emphasis, outside code
    spans (which keep what they hold)."""
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
                   for p in parts)


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return escape(" ".join(str(text).split())).replace("|", "\\|")


# -- the command line -------------------------------------------------------------------------------------------

def walk_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, parser) for every command under ``parser``, depth first, in help order."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk_commands(sub, (*path, name))


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(action.option_strings) or str(action.metavar or action.dest)
        if action.option_strings and action.nargs != 0:
            name += " " + formatter._format_args(action, action.dest.upper())
        name = f"`{name}`"  # choices show as {a,b,c}, as in the usage line
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {name} | {'yes' if action.required else ''} | {_cell(text)} |")
    return rows


def page_cli() -> str:
    os.environ.setdefault("COLUMNS", "120")  # usage lines wrapped the same on every machine
    from madbench.runner.cli import build_parser

    out = ["# Command line", "",
           "Generated from the parser at build time: every command, every option, with its `--help` text and example. "
           "`madbench COMMAND --help` prints the same.", ""]
    for path, parser in walk_commands(build_parser()):
        if not path:
            continue
        name = "madbench " + " ".join(path)
        out += [f"{'#' * min(len(path) + 1, 4)} {name}", "", _cell(parser.description or ""), "",
                "```text", parser.format_usage().strip(), "```", ""]
        rows = _option_rows(parser)
        if rows:
            out += ["| option | required | what it does |", "|---|---|---|", *rows, ""]
        if parser.epilog:
            out += ["```bash", parser.epilog.split("\n", 1)[1].strip(), "```", ""]
    return "\n".join(out)


# -- the Python API ---------------------------------------------------------------------------------------------

def _doc(obj: object) -> str:
    """``obj``'s own docstring: a class that has none does not show its base class's (pydantic's BaseModel's)."""
    text = obj.__dict__.get("__doc__") if inspect.isclass(obj) else inspect.getdoc(obj)
    return escape(inspect.cleandoc(text)) if text else ""


def _signature(obj: Any) -> str:
    """The signature with its annotations as written (the modules postpone them: no quotes around each)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [p.replace(annotation=p.annotation if not isinstance(p.annotation, str) else _Raw(p.annotation))
              for p in sig.parameters.values()]
    ret = sig.return_annotation
    return str(sig.replace(parameters=params, return_annotation=_Raw(ret) if isinstance(ret, str) else ret))


class _Raw(str):
    """An annotation that prints as written (``inspect`` quotes a plain string)."""

    def __repr__(self) -> str:
        return str(self)


def page_python_api() -> str:
    import madbench

    out = ["# Python API", "",
           "Generated from `madbench.__all__` at build time: each public name, its signature and its docstring. "
           "`import madbench` loads neither Ray nor pandas; each name is imported on first use.", ""]
    for name in madbench.__all__:
        if name == "__version__":
            out += ["## `madbench.__version__`", "", "The installed distribution's version (as `madbench --version`).", ""]
            continue
        obj = getattr(madbench, name)
        kind = "class" if inspect.isclass(obj) else "function"
        out += [f"## `madbench.{name}`", "", f"*{kind}*, defined in `{obj.__module__}`", ""]
        if kind == "function":
            out += ["```python", f"madbench.{name}{_signature(obj)}", "```", ""]
        out += [_doc(obj), ""]
        if inspect.isclass(obj) and issubclass(obj, BaseModel):
            out += _field_table(obj)
        if inspect.isclass(obj):
            for attr, value in _public_members(obj):
                target = value.fget if isinstance(value, property) else value.func if isinstance(value, cached_property) else value
                sig = "" if isinstance(value, (property, cached_property)) else _signature(value)
                out += [f"### `{name}.{attr}{sig}`", "", _doc(target) or "(no docstring)", ""]
    return "\n".join(out)


def _public_members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties of ``cls`` and of its madbench base classes (not pydantic's or object's)."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("madbench"):
            found |= {k: v for k, v in vars(klass).items()
                      if not k.startswith("_") and (inspect.isfunction(v) or isinstance(v, (property, cached_property)))}
    return sorted(found.items())


# -- batch and debate config fields -----------------------------------------------------------------------------

def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The ``#:`` comment lines right above each field of ``model``'s class body, joined."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    found: dict[str, str] = {}
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above, i = [], node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                above.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            if above:
                found[node.target.id] = " ".join(above)
    return found


def _type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: no module paths, no pydantic strictness markers."""
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r"Annotated\[(\w+), [^\]]*\]", r"\1", text)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", text)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    args = typing.get_args(annotation) if not isinstance(annotation, types.GenericAlias) else annotation.__args__
    return [m for a in args for m in _models_in(a)]


def _field_table(model: type[BaseModel]) -> list[str]:
    comments = field_comments(model)
    rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
    for name, f in model.model_fields.items():
        if f.default is not PydanticUndefined:
            default = f"`{f.default!r}`"
        elif f.default_factory is not None:
            default = "(its defaults)"
        else:
            default = "**required**"
        text = f.description or comments.get(name, "")
        kind = _type_name(f.annotation).replace("|", "\\|")
        rows.append(f"| `{name}` | `{kind}` | {default.replace('|', '')} | {_cell(text)} |")
    return [*rows, ""]


def _model_sections(root: type[BaseModel], title: str) -> list[str]:
    out, seen, queue = [], set(), [root]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        heading = title if model is root else f"`{model.__name__}`"
        out += [f"### {heading}", "", f"`{model.__module__}.{model.__name__}`", "", _doc(model), ""]
        out += _field_table(model)
        queue += [m for f in model.model_fields.values() for m in _models_in(f.annotation) if m not in seen]
    return out


def page_config() -> str:
    from madbench.debate.config import DebateConfig
    from madbench.runner.batch import BatchSpec

    out = ["# Batch and debate config fields", "",
           "Generated from the pydantic models at build time. Unknown keys are refused in both files, with the file "
           "and field named. Paths in a batch file are relative to the file.", "",
           "## A batch file (`configs/batches/*.yaml`)", ""]
    out += _model_sections(BatchSpec, "The batch (`BatchSpec`)")
    out += ["## A debate config (`configs/debate/*.yaml`)", ""]
    out += _model_sections(DebateConfig, "The config (`DebateConfig`)")
    return "\n".join(out)


# -- the results tables -----------------------------------------------------------------------------------------

#: What the less obvious columns mean, by (table, column). A note on a column the schema does not declare fails the
#: build (``page_tables``), so this cannot drift either; an undescribed column shows its name and type alone.
COLUMN_NOTES: dict[tuple[str, str], str] = {
    ("runs", "status"): "ok, failed or pending (failed runs are excluded from every statistic, and counted)",
    ("runs", "error"): "why a failed run failed",
    ("runs", "invest_quarter"): "the scenario's quarter: the cluster of the quarter-clustered tests",
    ("runs", "replicate"): "the sample index: replicates are distinct, reproducible draws",
    ("runs", "model_default"): "the model of the config's default tier",
    ("runs", "method"): "how the final allocation was formed: judge, mean or single (a staged protocol names its own)",
    ("runs", "rounds_run"): "rounds actually run (an early stop runs fewer than `rounds`)",
    ("runs", "rho_bar"): "ρ̄: the mean over agents of the final round's CRIT score",
    ("runs", "weights"): "the final allocation, as JSON (real tickers, blind runs too)",
    ("runs", "jsd_propose"): "generalised Jensen–Shannon divergence of the proposals",
    ("runs", "jsd_final"): "the same divergence after the last round",
    ("runs", "post_cutoff"): "true when the quarter starts after every answering model's training cutoff; null when a model is not in the registry",
    ("runs", "blind"): "the run read blind memos",
    ("runs", "sharpe"): "annualised Sharpe ratio over the quarter (Methods: backtest)",
    ("runs", "cost_usd"): "what the run's committed attempt paid (cached calls free)",
    ("runs", "cost_paid_usd"): "what all its attempts paid",
    ("runs", "calls_with_unknown_cost"): "calls of models without a price: the cost is unknown, not 0",
    ("runs", "oracle_gap_excess_pct"): "the oracle gap minus its null (Methods: debate dynamics)",
    ("calls", "phase"): "propose, critique, revise, judge, crit, rca, or a staged protocol's stage",
    ("calls", "model_requested"): "the model the routing asked for",
    ("calls", "model_used"): "the model that answered (differs after a fallback)",
    ("calls", "model_served"): "the model name the provider reported serving (often a dated snapshot)",
    ("calls", "cached"): "answered from madbench's response cache (no request sent)",
    ("calls", "cached_tokens"): "prompt tokens the provider's prompt cache served",
    ("calls", "list_cost_usd"): "the same tokens synchronously at list prices without the prompt cache's discount",
    ("calls", "provider_batch"): "answered through the provider's batch API",
    ("calls", "overhead_ms"): "the gateway's own time around the provider call",
    ("calls", "orphaned"): "a paid call the ledger counts that no trace records (in flight at a kill)",
    ("scores", "label"): "the scoring pass: original, or a `madbench rescore --label`",
    ("scores", "clips"): "pillars the failure counts capped, as JSON",
}

def page_tables() -> str:
    from madbench.results import FORMAT_VERSION, SPECS
    from madbench.results.table_schemas import ADDED

    added = {(t, c): v for v, tables in ADDED.items() for t, cols in tables.items() for c in cols}
    undeclared = [f"{t}.{c}" for t, c in COLUMN_NOTES if c not in SPECS[t].schema.names]
    if undeclared:
        raise ValueError(f"docs/_hooks/reference.py describes columns no schema declares: {', '.join(undeclared)}")
    out = ["# Results tables", "",
           f"Generated from the declared Parquet schemas (`madbench/results/table_schemas.py`) at build time. Results "
           f"format {FORMAT_VERSION}; a column added after format 1 says in which format it came, and a file of an older "
           "format reads it as null. Each table is `<table>.parquet` in the batch's results directory (re-scoring "
           "passes: `scores/<label>/scores.parquet`).", ""]
    for table, spec in SPECS.items():
        out += [f"## `{table}.parquet`", ""]
        if spec.open_prefix:
            out += [f"Columns starting with `{spec.open_prefix}` are open: each protocol adds its own, typed by their "
                    "values.", ""]
        out += ["| column | type | since format | what it holds |", "|---|---|---|---|"]
        out += [f"| `{f.name}` | `{f.type}` | {added.get((table, f.name), 1)} | {_cell(COLUMN_NOTES.get((table, f.name), ''))} |"
                for f in spec.schema]
        out.append("")
    return "\n".join(out)


# -- the hook ---------------------------------------------------------------------------------------------------

def page_changelog() -> str:
    """The repository's CHANGELOG.md, its links into docs/ (files beside the README) made relative to the site."""
    root = Path(__file__).resolve().parents[2]
    return (root / "CHANGELOG.md").read_text(encoding="utf-8").replace("](docs/", "](")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, function in {**GENERATED, "changelog.md": "page_changelog"}.items():
        files.append(File.generated(config, uri, content=globals()[function]()))
    return files
