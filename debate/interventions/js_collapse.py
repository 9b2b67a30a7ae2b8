"""A7/A8 JS collapse: when revision collapses the agents' divergence, nudge them and revise again.

Trigger (after revise, before CRIT): JS_rev / JS_prop < threshold, skipped when
JS_prop < min_js_prop (nothing to collapse). The retried revision must stay
within revision limits relative to the agent's revision input: at most
``max_changed_tickers`` tickers changed, each by at most ``max_change_pts``
points; a violation is fed back to the model like any validation error.

Hook: ``after_revise_round`` (debates of two or more agents): checks the trigger, and when it fires
re-runs every agent's revise with its role's nudge, up to ``max_retries`` times while it still fires.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.context import gather_turns, raise_if
from madbench.debate.events import InterventionCheck
from madbench.debate.interventions.hooks import Debate, fired
from madbench.debate.validation import Validated

DEFAULT_NUDGES = {
    "macro": "Your macro reading was yours for a reason. Keep the regime call unless the critiques showed evidence against it.",
    "value": "Hold to your valuation evidence; do not adopt others' positions unless their evidence beats yours.",
    "risk": "Keep your risk view independent: size by the risks you measured, not by what the desk prefers.",
    "technical": "Your price signals are independent information. Keep your ranking unless a critique refuted the signal itself.",
    "sentiment": "Keep your sentiment read distinct; converging with the desk removes the signal you add.",
    "devils_advocate": "Your role is to dissent. Restore the positions that argue against the consensus.",
}
GENERIC_NUDGE = "The desk's views are collapsing into one. Restore the positions your own evidence supports."


#: Its place in a protocol's call plan (``madbench.debate.protocols.plan``): the rates (fields of the estimate's
#: ``Rates``) at which it fires after a round's revisions and fires again after a re-revision.
FIRING_RATES = ("js_fire", "js_refire")
#: Divergence needs two allocations: with fewer agents it never checks.
MIN_AGENTS = 2


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    threshold: float = Field(0.8, gt=0, le=1)
    min_js_prop: float = Field(0.10, ge=0)
    nudges: dict[str, str] = Field(default_factory=dict)
    max_changed_tickers: int | None = Field(2, ge=0)
    max_change_pts: float | None = Field(10.0, gt=0)
    max_retries: int = Field(1, ge=1)


def triggered(js_prop: float, js_rev: float, p: Params) -> tuple[bool, str]:
    if js_prop < p.min_js_prop:
        return False, f"JS_prop {js_prop:.3f} < {p.min_js_prop:g}: nothing to collapse"
    ratio = js_rev / js_prop
    if ratio < p.threshold:
        return True, f"JS_rev/JS_prop = {js_rev:.3f}/{js_prop:.3f} = {ratio:.3f} < {p.threshold:g}"
    return False, f"ratio {ratio:.3f} ≥ {p.threshold:g}"


def nudge(role: str, p: Params) -> str:
    return p.nudges.get(role) or DEFAULT_NUDGES.get(role, GENERIC_NUDGE)


def limit_violations(before: dict[str, float], after: dict[str, float], p: Params) -> list[str]:
    """Revision limits on the retried revision (weights as fractions; points = 100 × fraction)."""
    changed = {t: (after.get(t, 0.0) - before.get(t, 0.0)) * 100 for t in set(before) | set(after)}
    moved = {t: d for t, d in changed.items() if abs(d) > 0.5}
    problems = []
    if p.max_changed_tickers is not None and len(moved) > p.max_changed_tickers:
        problems.append(f"change at most {p.max_changed_tickers} tickers from your previous allocation "
                        f"(you changed {len(moved)}: {', '.join(sorted(moved))})")
    if p.max_change_pts is not None:
        big = {t: d for t, d in moved.items() if abs(d) > p.max_change_pts + 1e-9}
        if big:
            problems.append(f"change no weight by more than {p.max_change_pts:g} points "
                            f"({', '.join(f'{t} {d:+.1f}' for t, d in sorted(big.items()))})")
    return problems


def _within_limits(before: dict[str, float], p: Params) -> Callable[[Validated], None]:
    return lambda v: raise_if(limit_violations(before, v.held_weights, p))


async def after_revise_round(debate: Debate, p: Params, round_: int) -> None:
    """Check for a collapse of divergence; on one, nudge every agent and revise again under revision limits."""
    if len(debate.agents) < MIN_AGENTS:
        return
    collapsed, reason = triggered(debate.js_in, debate.js_rev, p)
    debate.ctx.trace.write(InterventionCheck(name="js_collapse", round=round_, fired=collapsed, reason=reason,
                                             js_prop=debate.js_in, js_rev=debate.js_rev))
    if not collapsed:
        return
    fired(debate, {"name": "js_collapse", "round": round_, "reason": reason},
          "nudge every agent and re-run revise under revision limits")
    caps = {"max_changed_tickers": p.max_changed_tickers, "max_change_pts": p.max_change_pts}
    for attempt in range(1, p.max_retries + 1):
        outs = await gather_turns(*[
            debate.revise(a, [nudge(a.role, p)], f"revise:js{attempt}", _within_limits(debate.current[a.agent_id].held_weights, p), caps)
            for a in debate.agents])
        debate.revisions = dict(zip([a.agent_id for a in debate.agents], outs, strict=True))
        debate.js_rev = debate.revision_divergence(round_)
        if not triggered(debate.js_in, debate.js_rev, p)[0]:
            break
