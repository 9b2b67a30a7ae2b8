"""The one exception type for bad user input.

Every message names where the problem is (file, field), what is wrong, and how
to fix it. The CLI prints it as one line on stderr and exits non-zero; anything
else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError


class InputError(Exception):
    """Bad input: a config, a data file or a CLI argument."""

    def __init__(self, where: str | Path | None, problem: str, fix: str | None = None):
        self.where = str(where) if where is not None else None
        self.problem = problem
        self.fix = fix
        text = f"{self.where}: {problem}" if self.where else problem
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)

    def __reduce__(self) -> tuple[type[InputError], tuple[str | None, str, str | None]]:
        # Rebuilt from its three parts, not from the one text (pickle's default): an InputError raised in a Ray
        # actor or task then reaches the driver as itself.
        return type(self), (self.where, self.problem, self.fix)


#: A location element that names a union member pydantic tried (``str``, ``function-after[...]``, ``ModelSpec``),
#: not a field: field names in madbench's files are lower-case identifiers.
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|(list|dict|tuple|set|literal|function-\w+|union|nullable)\[.*|[A-Z]\w*)$")
_TYPE_MISMATCH = ("_type", "model_attributes_type", "union_tag_invalid")
#: The label pydantic puts before the message of an error a validator raised.
_PREFIXED = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """Render every pydantic error as `field.path: message`, joined on one line.

    For a field that accepts several forms (a model string or a full spec), pydantic reports one error per form;
    when one form got further (a typo inside the spec), the other forms' type mismatches are left out, and the
    union members' names are dropped from the path: `model.api_bse: unknown key`, not `model.function-after[...]`."""
    errors = []
    for e in err.errors():
        kept = [x for x in e["loc"] if isinstance(x, int) or not _UNION_TAG.match(str(x))]
        errors.append((kept, e, len(kept) < len(e["loc"])))
    specific = {tuple(loc[:1]) for loc, e, tagged in errors if tagged and not e["type"].endswith(_TYPE_MISMATCH)}
    parts = []
    for loc_parts, e, tagged in errors:
        if tagged and e["type"].endswith(_TYPE_MISMATCH) and tuple(loc_parts[:1]) in specific:
            continue  # another form of this field got further: its error says what is wrong
        loc = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in loc_parts)
        loc = loc.replace(".[", "[")
        if prefix:
            loc = f"{prefix}.{loc}" if loc and not loc.startswith("[") else f"{prefix}{loc}"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] in _PREFIXED and msg.startswith(_PREFIXED[e["type"]]):
            msg = msg[len(_PREFIXED[e["type"]]):]  # our validators' own messages, without pydantic's label
        part = f"{loc}: {msg}" if loc else msg
        if part not in parts:
            parts.append(part)
    return "; ".join(parts)
