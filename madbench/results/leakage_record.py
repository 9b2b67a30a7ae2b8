"""A batch's recorded leakage audit: ``<results>/leakage_audit/audit.json`` (written by ``runner/leakage_gate.py``,
read by the report), beside the tables it summarises (residue.parquet, identify.parquet, identify_summary.parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from madbench.results.layout import LEAKAGE_AUDIT

RECORD = "audit.json"


class ModelAudit(BaseModel):
    """One probed model's hit rates over all memos, for the assets and for the quarter."""

    model: str
    target: Literal["asset", "quarter"]
    memos: int
    trials: int
    hits: int
    rate: float
    chance: float
    cp_low: float
    cp_high: float
    leaks: bool


class AuditRecord(BaseModel):
    """``<results>/leakage_audit/audit.json``."""

    model_config = ConfigDict(extra="forbid")
    options: dict[str, Any]
    on_leak: Literal["refuse", "warn"]
    #: clear: no model beat chance; refused or warned: some did, and what ``on_leak`` made of it.
    decision: Literal["clear", "warned", "refused"]
    memos: int
    residue: dict[str, int]
    macro_k_min: int
    macro_k_median: float
    #: The quarters the macro blocks were compared with (first-last, and how many).
    reference: str
    probes: list[ModelAudit]
    written: str = ""

    @property
    def leaks(self) -> list[ModelAudit]:
        return [p for p in self.probes if p.leaks]


def leak_line(p: ModelAudit) -> str:
    return (f"{p.model} names the {p.target} of {p.hits} of {p.trials} blind trials ({p.memos} memos): rate {p.rate:.3f}, "
            f"95% CI {p.cp_low:.3f}-{p.cp_high:.3f}, above chance {p.chance:.3f}")


def audit_dir(root: str | Path) -> Path:
    return Path(root) / LEAKAGE_AUDIT


def read_audit(root: str | Path) -> AuditRecord | None:
    """The batch's recorded leakage audit, or None when it has none."""
    path = audit_dir(root) / RECORD
    if not path.exists():
        return None
    return AuditRecord.model_validate_json(path.read_bytes())
