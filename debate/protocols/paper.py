"""The paper's protocol (PAPER_NOTES §2–3): propose, then T rounds of critique → revise → CRIT → PID,
with interventions at their hook points, then a judge or the mean.

Agents within a phase run concurrently; their events are written in agent
order once the phase completes, so a replay writes the same trace.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict

from debate.config import AgentConfig
from debate.context import RunContext, raise_if
from debate.control import PIDState, cash_spread, jsd, pairwise_js, pid_step
from debate.events import ControllerStep, Divergence, EarlyStop, Intervention, InterventionCheck
from debate.interventions import crit_causal as crit_causal_mod
from debate.interventions import js_collapse as js_mod
from debate.interventions import parse_intervention
from debate.interventions import rca as rca_mod
from debate.outcome import Outcome
from debate.schemas import CritiqueItem
from debate.task import ReceivedCritique
from debate.validation import Validated, cap_weights


class Options(BaseModel):
    """The paper protocol's knobs are the config's own fields (rounds, pid, interventions …)."""
    model_config = ConfigDict(extra="forbid")


def _peer_view(ctx: RunContext, outputs: dict[str, Validated], agent: AgentConfig) -> list[dict]:
    roles = {a.agent_id: a.role for a in ctx.config.agents}
    return [{"agent_id": t, "role": roles[t], "output": outputs[t].value.model_dump_json(indent=1)}
            for t in ctx.config.targets_of(agent.agent_id)]


def _divergence(ctx: RunContext, phase: str, round_: int, outputs: dict[str, Validated]) -> float:
    ids = sorted(outputs)
    weights = [outputs[a].weights for a in ids]
    cash = [outputs[a].value.cash_weight for a in ids]
    value = jsd(weights, cash)
    ctx.trace.write(Divergence(phase=phase, round=round_, jsd=value,
                   pairwise=pairwise_js({a: outputs[a].weights for a in ids}), cash_spread=cash_spread(cash)))
    return value


def mean_allocation(ctx: RunContext, finals: dict[str, Validated]) -> tuple[dict[str, float], float, list[str]]:
    """Unweighted mean of the final allocations, made feasible for max_tickers if the union exceeds it."""
    n = len(finals)
    weights = {t: sum(v.weights[t] for v in finals.values()) / n for t in ctx.universe}
    cash = sum(v.value.cash_weight for v in finals.values()) / n
    notes = []
    c = ctx.constraints
    held = [t for t in ctx.universe if weights[t] > 0]
    if c.max_tickers is not None and len(held) > c.max_tickers:
        keep = sorted(held, key=lambda t: (-weights[t], t))[: c.max_tickers]
        dropped = sorted(set(held) - set(keep))
        invested = sum(weights[t] for t in keep)
        weights = cap_weights({t: (weights[t] / invested * (1 - cash) if t in keep else 0.0) for t in ctx.universe}, c.max_weight)
        notes.append(f"mean held {len(held)} tickers > max_tickers {c.max_tickers}: dropped {', '.join(dropped)} and rescaled")
    return weights, cash, notes


async def run(ctx: RunContext) -> Outcome:
    cfg = ctx.config
    agents = cfg.agents
    params = {iv.name: parse_intervention(iv, "config") for iv in cfg.interventions}
    state = PIDState(beta=cfg.pid.beta0)
    outcome_iv: list[dict] = []

    # -- propose
    async def propose(a: AgentConfig) -> Validated:
        task = ctx.base_task(a.agent_id, a.role, "propose", 1, state.beta)
        return await ctx.ask(a, "propose", 1, task, {})

    props = dict(zip([a.agent_id for a in agents], await asyncio.gather(*[propose(a) for a in agents])))
    current = props
    js_prev = _divergence(ctx, "propose", 0, props) if len(agents) > 1 else 0.0
    rho_by_round: list[float] = []
    js_log = {"propose": js_prev}

    if cfg.rounds == 0 and cfg.score_rounds:
        scores = await asyncio.gather(*[ctx.crit(a, 0, props[a.agent_id].value, []) for a in agents])
        rho_by_round.append(sum(s.rho for s in scores) / len(scores))

    rounds_run = 0
    for t in range(1, cfg.rounds + 1):
        rounds_run = t
        js_in = jsd([current[a.agent_id].weights for a in agents],
                    [current[a.agent_id].value.cash_weight for a in agents]) if len(agents) > 1 else 0.0
        received: dict[str, list[tuple[str, CritiqueItem]]] = {a.agent_id: [] for a in agents}

        # -- critique
        async def critique(a: AgentConfig):
            targets = cfg.targets_of(a.agent_id)
            if not targets:
                return None
            peer_claims = {p: {c.claim_id for c in current[p].value.claims} for p in targets}
            task = ctx.base_task(a.agent_id, a.role, "critique", t, state.beta, own=current[a.agent_id].value,
                                 peers={p: current[p].value for p in targets})
            return await ctx.ask(a, "critique", t, task, {"peers": _peer_view(ctx, current, a),
                                                          "tone": ctx.profiles[a.agent_id].tone(state.beta)},
                                 peer_claims=peer_claims)

        crits = await asyncio.gather(*[critique(a) for a in agents])
        for a, c in zip(agents, crits):
            if c is None:
                continue
            for item in c.value.critiques:
                received[item.target_agent].append((a.agent_id, item))

        # -- revise (with the RCA consistency loop when enabled)
        async def revise(a: AgentConfig, nudges: list[str], label: str, extra=None, limits: dict | None = None) -> Validated:
            mine = received[a.agent_id]
            task = ctx.base_task(a.agent_id, a.role, "revise", t, state.beta, own=current[a.agent_id].value,
                                 critiques_received=[ReceivedCritique(from_agent=f, item=i) for f, i in mine],
                                 nudges=nudges, revision_limits=limits)
            variables = {"own": current[a.agent_id].value.model_dump_json(indent=1), "nudges": nudges,
                         "critiques": [{"from_agent": f, **i.model_dump()} for f, i in mine]}
            out = await ctx.ask(a, "revise", t, task, variables, extra_check=extra, label=label)
            if "rca" in params and "revise" in params["rca"].phases:
                p: rca_mod.Params = params["rca"]
                for level in range(1, p.max_retries + 1):
                    verdict = await ctx.rca(a, "revise", t, current[a.agent_id].value, out.value, mine)
                    if verdict.ok:
                        break
                    fb = rca_mod.feedback(level, state.beta, verdict.feedback or verdict.reason, p)
                    record = {"name": "rca", "round": t, "agent": a.agent_id, "level": level,
                              "verdict": verdict.verdict, "reason": verdict.reason}
                    ctx.trace.write(Intervention(**record, action="retry revise with feedback", feedback=fb))
                    outcome_iv.append(record)
                    task = task.model_copy(update={"nudges": [*nudges, fb]})
                    out = await ctx.ask(a, "revise", t, task, {**variables, "nudges": [*nudges, fb]},
                                        extra_check=extra, label=f"{label}:rca{level}")
                else:
                    final = await ctx.rca(a, "revise", t, current[a.agent_id].value, out.value, mine)
                    if not final.ok:
                        ctx.trace.write(Intervention(name="rca", round=t, agent=a.agent_id, level=p.max_retries + 1,
                                       verdict=final.verdict, reason=final.reason, action="kept last revision (retries exhausted)"))
            return out

        revs = dict(zip([a.agent_id for a in agents], await asyncio.gather(*[revise(a, [], "revise") for a in agents])))
        js_rev = _divergence(ctx, "revise", t, revs) if len(agents) > 1 else 0.0

        # -- JS collapse (A7/A8): after revise, before CRIT
        if "js_collapse" in params and len(agents) > 1:
            p: js_mod.Params = params["js_collapse"]
            fired, reason = js_mod.triggered(js_in, js_rev, p)
            ctx.trace.write(InterventionCheck(name="js_collapse", round=t, fired=fired, reason=reason,
                           js_prop=js_in, js_rev=js_rev))
            if fired:
                record = {"name": "js_collapse", "round": t, "reason": reason}
                ctx.trace.write(Intervention(**record, action="nudge every agent and re-run revise under revision limits"))
                outcome_iv.append(record)

                def limits(a):
                    before = current[a.agent_id].weights
                    return lambda v: raise_if(js_mod.limit_violations(before, v.weights, p))

                for attempt in range(1, p.max_retries + 1):
                    caps = {"max_changed_tickers": p.max_changed_tickers, "max_change_pts": p.max_change_pts}
                    revs = dict(zip([a.agent_id for a in agents], await asyncio.gather(*[
                        revise(a, [js_mod.nudge(a.role, p)], f"revise:js{attempt}", limits(a), caps) for a in agents])))
                    js_rev = _divergence(ctx, "revise", t, revs)
                    if not js_mod.triggered(js_in, js_rev, p)[0]:
                        break

        # -- CRIT on the revisions
        scores = {}
        if cfg.score_rounds:
            got = await asyncio.gather(*[ctx.crit(a, t, revs[a.agent_id].value, received[a.agent_id]) for a in agents])
            scores = {s.agent_id: s for s in got}
            if "crit_causal" in params:
                p = params["crit_causal"]
                for agent_id in crit_causal_mod.targets({k: s.scores.causal_alignment for k, s in scores.items()}, p):
                    a = next(x for x in agents if x.agent_id == agent_id)
                    record = {"name": "crit_causal", "round": t, "agent": agent_id,
                              "reason": f"P4 {scores[agent_id].scores.causal_alignment:.2f} < {p.p4_threshold:g}"}
                    ctx.trace.write(Intervention(**record, action="nudge, re-run revise and CRIT"))
                    outcome_iv.append(record)
                    for attempt in range(1, p.max_retries + 1):
                        revs[agent_id] = await revise(a, [p.nudge], f"revise:crit_causal{attempt}")
                        scores[agent_id] = await ctx.crit(a, t, revs[agent_id].value, received[agent_id], label=f"crit:retry{attempt}")
                        if scores[agent_id].scores.causal_alignment >= p.p4_threshold:
                            break
                js_rev = _divergence(ctx, "revise", t, revs) if len(agents) > 1 else 0.0
            rho_bar = sum(s.rho for s in scores.values()) / len(scores)
            rho_by_round.append(rho_bar)
            state, step = pid_step(state, rho_bar, js_rev, cfg.pid)
            ctx.trace.write(ControllerStep(round=t, step=step.model_dump(), state=state.model_dump()))
        js_log[f"revise_{t}"] = js_rev
        current = revs
        if scores and step.early_stop:
            ctx.trace.write(EarlyStop(round=t, reason=f"JS {js_rev:.4f} < ε and |Δρ̄| < Δρ"))
            break

    # -- aggregation
    if cfg.aggregation == "judge":
        roles = {a.agent_id: a.role for a in agents}
        finals = [{"agent_id": k, "role": roles[k], "output": v.value.model_dump_json(indent=1)} for k, v in current.items()]
        task = ctx.base_task("judge", "judge", "judge", rounds_run, state.beta, peers={k: v.value for k, v in current.items()})
        decision = await ctx.ask(None, "judge", rounds_run, task, {"finals": finals})
        weights, cash, notes, method = decision.weights, decision.value.cash_weight, decision.notes, "judge"
    else:
        weights, cash, notes = mean_allocation(ctx, current)
        method = "mean" if len(agents) > 1 else "single"
    return Outcome(weights=weights, cash=cash, method=method, rounds_run=rounds_run,
                   rho_bar=rho_by_round[-1] if rho_by_round else None, rho_by_round=rho_by_round, js=js_log,
                   interventions=outcome_iv, notes=notes)


__all__ = ["run"]
