"""What an agent is asked to do in one turn, as structured data.

The prompt an LLM sees is rendered from this object; the rule-based analysts
read it directly. Both therefore answer the same question from the same facts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from madbench.data.memo import EvidenceItem
from madbench.data.scenario import Constraints
from madbench.debate.schemas import Argument, ReceivedCritique, Tier
from madbench.gateway.phases import AgentPhase

TaskPhase = AgentPhase


class AgentTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str
    role: str
    phase: TaskPhase
    #: The agent's prompt tier: what it returns (``madbench.debate.schemas.schema_for``), claims or a free-text rationale.
    tier: Tier = "causal"
    universe: list[str]
    constraints: Constraints
    evidence: list[EvidenceItem]
    #: The agent's own latest proposal or revision (critique and revise phases).
    own: Argument | None = None
    #: Other agents' latest proposals or revisions, by agent id (critique and judge phases).
    peers: dict[str, Argument] = Field(default_factory=dict)
    critiques_received: list[ReceivedCritique] = Field(default_factory=list)
    #: Contentiousness in [0, 1] chosen by the controller.
    beta: float = 0.5
    round: int = 1
    #: Moderator notes for this turn (intervention nudges, RCA feedback), as the prompt shows them.
    nudges: list[str] = Field(default_factory=list)
    #: Limits a re-revision must respect (JS-collapse retries): max changed tickers and points per ticker.
    revision_limits: dict[str, float | None] | None = None


class StageTask(BaseModel):
    """The structured context of one stage: what an LLM is shown in prose, a rule-based answerer gets as data."""

    model_config = ConfigDict(extra="forbid")
    protocol: str
    stage: str
    role: str
    agent_id: str
    round: int = 0
    universe: list[str]
    constraints: Constraints
    evidence: list[EvidenceItem]
    inputs: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
