"""The one exception type for bad user input.

Every message names where the problem is (file, field), what is wrong, and how
to fix it. The CLI prints it as one line on stderr and exits non-zero; anything
else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

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


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """Render every pydantic error as `field.path: message`, joined on one line."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in e["loc"])
        loc = loc.replace(".[", "[")
        if prefix:
            loc = f"{prefix}.{loc}" if loc and not loc.startswith("[") else f"{prefix}{loc}"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
