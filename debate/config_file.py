"""Reading a debate config file: apply its routing profile, validate the fields, then resolve every name it uses.

Every role profile, protocol and intervention is looked up here, so a bad name or a template typo fails
before any model is called. (The scorer's rubric is checked by the layer that owns it: ``scoring``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.plugins import import_object, is_import_path
from madbench.data.templates import read_yaml
from madbench.debate.config import DebateConfig
from madbench.debate.interventions import INTERVENTIONS, parse_intervention
from madbench.debate.profiles import load_profile
from madbench.debate.protocols import load_protocol, protocol_options
from madbench.debate.run_metrics import check_metrics
from madbench.gateway.routing_profiles import with_profile


def parse_debate_config(data: Any, where: str, folder: Path | None = None) -> DebateConfig:
    """``data`` validated as a config, its ``routing:`` profile (if any) applied first, and every name resolved;
    ``folder``: the config file's, where a protocol named by import path may live."""
    if isinstance(data, dict):
        data = with_profile(data, where)
    try:
        cfg = DebateConfig.model_validate(data)
    except ValidationError as exc:
        raise InputError(where, format_validation_error(exc), "fix the listed fields (unknown keys are rejected)") from None
    check_names(cfg, where, folder)
    return cfg


def load_debate_config(path: str | Path) -> DebateConfig:
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "debate config not found", "give a YAML file such as configs/debate/causal-debate-3.yaml")
    return parse_debate_config(read_yaml(p), str(p), p.parent)


def check_names(cfg: DebateConfig, where: str, folder: Path | None = None) -> None:
    """Resolve every profile, protocol and intervention now, so errors surface before any LLM call."""
    protocol = load_protocol(cfg.protocol, where, folder)
    problems = protocol.config_problems(cfg)
    if problems:
        raise InputError(where, "; ".join(problems), f"fix the {cfg.protocol} config")
    protocol_options(cfg, where)
    check_metrics([*protocol.metrics, *cfg.metrics], where, folder)
    if is_import_path(cfg.scorer):  # found now, beside the file; the scoring layer checks what it is
        import_object(cfg.scorer, where, "scorer", folder)
    for i, agent in enumerate(cfg.agents):
        load_profile(agent.role, agent.tier, where=f"{where}: agents[{i}]")
    if cfg.aggregation == "judge":
        load_profile("judge", cfg.judge_tier, where=f"{where}: judge_tier")
    first: dict[str, int] = {}
    for i, iv in enumerate(cfg.interventions):
        if iv.name in first:
            raise InputError(where, f"interventions[{i}].name: {iv.name!r} is listed twice (also interventions[{first[iv.name]}])",
                             "list each intervention once, with all its parameters in that one entry")
        first[iv.name] = i
        if iv.name not in INTERVENTIONS:
            raise InputError(where, f"interventions[{i}].name: unknown intervention {iv.name!r}",
                             f"use one of: {', '.join(INTERVENTIONS)}")
        parse_intervention(iv, f"{where}: interventions[{i}]")
