"""What one `madbench run` is asked to do: the batch file and its overrides, built once from keyword arguments (the
Python API, ``madbench.run``) or from the parsed command line, so that both read the same typed fields."""

from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from madbench.data.errors import InputError, format_validation_error
from madbench.runner.batch import BatchSpec
from madbench.runner.deployment import set_twice

#: The flag of a field whose name is not the flag's.
FLAGS = {"settings": "--set", "continue_past": "--continue", "results_dir": "--results-dir"}


class RunOptions(BaseModel):
    """A batch file and the overrides `madbench run` accepts (each field is the flag of the same name)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The batch YAML, e.g. configs/batches/rules-35.yaml; for a batch built in Python (``spec``), a label naming it
    #: in messages.
    batch: str
    #: A batch built in Python (``madbench.run(BatchSpec(...))``), read instead of a file.
    spec: BatchSpec | None = None
    #: The absolute folder ``spec``'s relative paths (configs, scenarios, pack, results_dir, ...) are read from.
    base_dir: str | None = None
    #: Every role and phase on this model (e.g. rules/auto); results go to <batch>@<model>.
    model: str | None = None
    #: Every config on this routing profile (configs/routing/NAME.yaml); results go to <batch>@<NAME>.
    routing: str | None = None
    #: Deployment overrides ``TIER.FIELD=VALUE`` (api_base, api_key_env, limits.<field>); run ids do not change.
    settings: list[str] = []
    #: Parent of the batch's results directory (default: the batch's results_dir).
    results_dir: str | None = None
    #: The LLM response cache (else $MADBENCH_CACHE_DIR, else the batch's, else $MADBENCH_HOME/llm).
    cache_dir: str | None = None
    #: A scenario YAML file read instead of the batch's scenarios (its `ids` still select).
    scenarios: str | None = None
    #: The data pack directory (else $MADBENCH_PACK, else ../shared/data/market).
    pack: str | None = None
    #: Evidence directories (else $MADBENCH_EVIDENCE).
    evidence: list[str] | None = None
    #: A Ray cluster to join (else $RAY_ADDRESS, else a local Ray).
    address: str | None = None
    #: Answer LLM calls through the provider's batch API (`execution: batch`).
    provider_batch: bool = False
    #: Allow a batch of up to this many runs.
    max_runs: int | None = None
    #: Also re-run runs recorded as failed.
    retry_failed: bool = False
    #: Refuse to run from a git checkout with uncommitted changes (the manifest would record a commit that is not the code).
    require_clean: bool = False
    #: A sequential batch: go on past its recorded decision (`--continue`; recorded in its sequential.json).
    continue_past: bool = False
    #: Show the progress bar.
    progress: bool = False
    #: The estimate only: a pilot batch's results directory whose measurements replace the declared rates.
    calibrate_from: str | None = None

    @field_validator("batch", "results_dir", "cache_dir", "scenarios", "pack", "address", "calibrate_from", "base_dir",
                     mode="before")
    @classmethod
    def _path_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("batch", "model", "routing", "results_dir", "cache_dir", "scenarios", "pack", "address",
                     "calibrate_from")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        # `--model ''` (an unset shell variable) would otherwise be taken as "not given" and run the batch's own models
        if value is not None and not value.strip():
            raise ValueError("is empty")
        return value

    @field_validator("settings")
    @classmethod
    def _each_key_once(cls, value: list[str]) -> list[str]:
        twice = set_twice(value)
        if twice:
            raise ValueError(f"{', '.join(twice)} is set more than once (alone or within another setting)")
        return value

    @field_validator("evidence", mode="before")
    @classmethod
    def _path_texts(cls, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)):  # one directory given bare
            value = [value]
        return [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value] if value is not None else None

    @classmethod
    def of(cls, where: str = "madbench.run", **fields: Any) -> RunOptions:
        """The options from keyword arguments; a value of the wrong type is an InputError naming the argument."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise InputError(where, format_validation_error(exc),
                             "pass paths as str or pathlib.Path, max_runs as an int and the switches as bools") from None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options of a parsed `madbench run` (or `madbench demo`) command line: the fields its parser defines."""
        given = vars(args)
        fields = {k: given[k] for k in cls.model_fields if k in given}
        if "quiet" in given:
            fields["progress"] = not given["quiet"]
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else None
            flag = FLAGS.get(field, f"--{field}".replace("_", "-")) if field else "madbench run"
            fix = "give each TIER.FIELD once" if field == "settings" else "give a value, or leave the option out"
            raise InputError(flag, first["msg"].removeprefix("Value error, "), fix) from None

    def retry_command(self) -> str:
        """The exact command that re-runs this batch's failed runs (these options, plus --retry-failed); for a batch
        built in Python, the call."""
        if self.spec is not None:
            return f"madbench.run(<the same BatchSpec>, base_dir={self.base_dir!r}, ..., retry_failed=True)"
        words = ["madbench", "run", self.batch]
        for flag, value in (("--results-dir", self.results_dir), ("--cache-dir", self.cache_dir), ("--pack", self.pack),
                            ("--scenarios", self.scenarios), ("--model", self.model), ("--routing", self.routing),
                            ("--address", self.address)):
            if value:
                words += [flag, str(value)]
        for setting in self.settings:
            words += ["--set", setting]
        if self.provider_batch:
            words.append("--provider-batch")
        for e in self.evidence or []:
            words += ["--evidence", str(e)]
        return shlex.join(words + ["--retry-failed"])
