"""The model-cutoff registry (``configs/model_cutoffs.yaml``): which quarters a model cannot remember.

A quarter is after a model's cutoff when its first day falls after the cutoff date: the model cannot have read
how the quarter went. ``runs.parquet`` gets one ``post_cutoff`` column from it and ``madbench probe recall`` one
per quarter, so a result can be split into the part recall could explain and the part it cannot.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from datetime import date
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.calendar import Quarter
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import read_yaml
from madbench.debate.events import AnyEvent, LLMCall

CUTOFFS_FILE = CONFIGS_DIR / "model_cutoffs.yaml"
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
#: What a registry file looks like, for the fix of an error in one.
LAYOUT = ('write it as cutoffs: {model-glob: YYYY-MM}, e.g. cutoffs: {"gpt-4o*": 2023-10, "claude-3-5-haiku*": 2024-07} '
          '(or a date YYYY-MM-DD; the first matching glob wins)')


class CutoffRegistry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    #: Model string or glob -> cutoff date, in file order (the first match wins).
    cutoffs: dict[str, date]

    @field_validator("cutoffs", mode="before")
    @classmethod
    def _months(cls, value):
        """A month (YYYY-MM) stands for its last day: a model trained "through August" may have read August 31."""
        if not isinstance(value, dict):
            return value
        out = {}
        for pattern, when in value.items():
            m = _MONTH.match(when) if isinstance(when, str) else None
            if m:
                year, month = int(m.group(1)), int(m.group(2))
                if not 1 <= month <= 12:
                    raise ValueError(f"{pattern}: month {month} of {when!r} is not 01..12")
                when = date(year, month, calendar.monthrange(year, month)[1])
            out[str(pattern)] = when
        return out

    def cutoff_of(self, model: str) -> date | None:
        """The cutoff of the first pattern matching the model string or its last part; None when none matches."""
        full = model.lower()
        name = full.rsplit("/", 1)[-1]
        for pattern, when in self.cutoffs.items():
            p = pattern.lower()
            if fnmatchcase(full, p) or fnmatchcase(name, p):
                return when
        return None

    def post_cutoff(self, quarter: str | Quarter, llm_models: Iterable[str]) -> bool | None:
        """Does ``quarter`` start after the cutoff of every one of ``llm_models``?

        Three-valued, as SQL's AND: False as soon as one listed model's cutoff reaches the quarter's first day;
        otherwise None when some model is not in the registry (unknown is never read as False); True when every
        model is listed and before the quarter. No language model at all (rule-based answers only): True, since
        nothing was trained on the quarter."""
        start = (quarter if isinstance(quarter, Quarter) else Quarter.parse(str(quarter))).start.date()
        cutoffs = [self.cutoff_of(m) for m in set(llm_models)]
        if any(c is not None and c >= start for c in cutoffs):
            return False
        return None if any(c is None for c in cutoffs) else True


@lru_cache(maxsize=8)
def load_cutoffs(path: str | Path | None = None) -> CutoffRegistry:
    """The registry at ``path`` (default: configs/model_cutoffs.yaml), read once per process; a malformed one is an
    ``InputError`` whose fix shows the expected layout (``LAYOUT``)."""
    path = Path(path) if path else CUTOFFS_FILE
    try:
        return CutoffRegistry.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), LAYOUT) from None


def run_post_cutoff(quarter: str, events: list[AnyEvent], registry: CutoffRegistry | None = None) -> bool | None:
    """``post_cutoff`` of one run from its trace: the language models that answered its calls (``model_used``, so a
    fallback counts); None for a run that answered no call at all (nothing is known of its models)."""
    calls = [e for e in events if isinstance(e, LLMCall)]
    if not calls:
        return None
    return (registry or load_cutoffs()).post_cutoff(quarter, {e.model_used for e in calls if e.is_llm})
