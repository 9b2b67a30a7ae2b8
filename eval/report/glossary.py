"""The report's glossary of debate-dynamics metrics (name, formula, meaning) and its caveats: what the data cannot show.

The formulas are those of ``madbench.eval.dynamics``, whose docstrings define them; this is their reader-facing copy,
and ``tests/eval/report/test_glossary.py`` checks that it names every dynamics column.
"""

from __future__ import annotations

from typing import NamedTuple


class Term(NamedTuple):
    columns: str  # the Parquet column(s) it defines
    formula: str
    meaning: str


#: Per agent i and round t: P_i what i revised, R_i its revision, m₋ᵢ the others' mean, C_c critic c's allocation.
DYNAMICS: tuple[Term, ...] = (
    Term("L1, JS", "L1(p, q) = Σ_k |p_k − q_k|;  JS(p, q) = H((p + q)/2) − (H(p) + H(q))/2 (base 2)",
         "distances between allocations, cash counted as one more holding"),
    Term("shift_l1, shift_js (_before, _after), shift_l1_mean, shift_js_mean",
         "shift = d(P_i, m₋ᵢ) − d(R_i, m₋ᵢ), d = L1 or JS; the run's mean over its (round, agent) rows",
         "i's move toward the others, their allocations held where they were when critiqued (> 0: closer)"),
    Term("critics, pulls", "pull_c = 1 − L1(R_i, C_c) / L1(P_i, C_c)",
         "who critiqued i, and the share of its distance to each critic c that i closed (1: onto c; < 0: away); "
         "undefined when P_i = C_c"),
    Term("flip_toward, flip_pull, flips", "c* = argmax_c pull_c, a flip when pull_c* ≥ ½",
         "i closed at least half its distance to its strongest-pulling critic"),
    Term("adopted_evidence_ids", "(cited(R_i) − E_i) ∩ K_i,t;  E_i = ∪_{s<t} cited(i after s), "
         "K_i,t = ∪_c (cited(P_c) ∪ cited(c's critiques of i))",
         "IDs new to i that its critics had cited: following the critic, not evidence of i's own"),
    Term("new_evidence, new_evidence_ids, flips_new_evidence", "new_i,t = |cited(R_i) − E_i − K_i,t|",
         "IDs neither i nor its critics had cited; flips_new_evidence counts the flips with new_i,t > 0"),
    Term("sycophancy, sycophancy_mean", "syc_i,t = max_c clip(pull_c, 0, 1) if new_i,t = 0, else 0",
         "movement toward a critic without evidence of one's own (null when nobody critiqued i)"),
    Term("jsd_pairwise_before/_after, collapse, collapse_rate, collapse_mean",
         "D_t = mean_{j<k} JS(A_j, A_k);  collapse_t = D_{t−1} − D_t;  rate_t = collapse_t / D_{t−1}",
         "the round's fall in mean pairwise disagreement"),
    Term("debate_turnover", "turnover = L1(mean_i proposal_i, final allocation)", "what critique, revision and aggregation changed"),
    Term("best_agent, best_agent_return_pct, oracle_gap_pct", "G = max_i r_i − r_agg (pp)",
         "the best single agent's ex-post return over the aggregate's; grows with the number of agents k by "
         "selection alone"),
    Term("oracle_agents, oracle_gap_null_pct", "N_k = e_k · s_k / c4(k);  e_k = ∫ x k φ(x) Φ(x)^{k−1} dx "
         "(David & Nagaraja 2003, §2.1), c4(k) = √(2/(k−1)) Γ(k/2) / Γ((k−1)/2)",
         "the expected G of k agents drawn from one normal distribution with the run's cross-agent SD s_k "
         "(aggregate earning their mean); k = agents with a return"),
    Term("oracle_gap_excess_pct, oracle_gap_excess_reason", "X = G − N_k",
         "0 in expectation under that null for every k: compare configurations on X, not G; undefined for one "
         "agent (the reason column says why), never 0"),
)

#: What the report's numbers cannot show, whatever the statistics say.
CAVEATS: tuple[str, ...] = (
    "News sentiment is dated the trading day after its window ends (the table has no article dates), so a memo holds "
    "only windows that ended before its as-of day: the latest window is at least one quarter old.",
    "Macro values are the latest revised vintage (FRED as downloaded), not the figures first published: release lags "
    "are modelled, revisions are not, so a memo can hold a value revised after its as-of date.",
    "The universe is today's large caps, chosen with hindsight (no delisted names): survivorship bias flatters any "
    "long-only portfolio of them, baselines included.",
)
