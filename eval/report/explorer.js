// Trace explorer: renders one run's digest. Every string from a trace goes through textContent, never innerHTML.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const runs = data.runs, memos = data.memos;
  const root = document.getElementById("explorer");
  if (!runs.length) { root.textContent = "No traces in this results directory."; return; }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return node;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? "n/a" : Number(x).toFixed(d);
  const section = (title, ...body) => el("details", { open: "" }, el("summary", {}, title), ...body);

  function table(headers, rows) {
    return el("table", { class: "small" },
      el("thead", {}, el("tr", {}, ...headers.map(h => el("th", {}, h)))),
      el("tbody", {}, ...rows.map(r => el("tr", {}, ...r.map(c => el("td", {}, c))))));
  }

  // A blind run's pseudonyms → real tickers (its turns are in pseudonyms; its final allocation in real tickers).
  let blindNames = {};
  const ticker = t => blindNames[t] ? t + " (" + blindNames[t] + ")" : t;

  function allocation(weights) {
    const entries = Object.entries(weights || {}).filter(e => e[1] > 0).sort((a, b) => b[1] - a[1]);
    const zero = Object.entries(weights || {}).filter(e => !(e[1] > 0)).map(e => ticker(e[0]));
    return entries.map(([t, w]) => ticker(t) + " " + (100 * w).toFixed(1) + "%").join(", ") + (zero.length ? " · not held: " + zero.join(", ") : "");
  }

  function claims(list) {
    return el("ul", {}, ...(list || []).map(c => el("li", {},
      el("b", {}, c.claim_id + " "), c.claim_text + " ",
      el("span", { class: "muted" }, "[" + (c.evidence_ids || []).join(", ") + "] conf " + fmt(c.confidence, 2) +
        (c.reasoning_type ? " · " + c.reasoning_type : "")))));
  }

  function turn(t) {
    const o = t.output || {};
    const head = el("h4", {}, "Round " + t.round + " · " + t.label + " · " + t.agent + " (" + (t.model || "") + ")");
    const parts = [head];
    if (o.thesis) parts.push(el("p", {}, el("i", {}, o.thesis)));
    if (o.claims) parts.push(claims(o.claims));
    if (o.critiques) parts.push(el("ul", {}, ...o.critiques.map(c => el("li", {},
      el("b", {}, "→ " + (c.target_agent || "") + " " + (c.target_claim || "") + ": "), c.critique_text + " ",
      el("span", { class: "muted" }, "[" + (c.evidence_ids || []).join(", ") + "] " + (c.portfolio_implication || ""))))));
    if (o.critique_responses) parts.push(el("ul", {}, ...o.critique_responses.map(r => el("li", {},
      el("b", {}, r.disposition + " "), "(" + r.from_agent + " on " + r.target_claim + ") " + r.justification))));
    if (o.rationale) parts.push(el("p", {}, o.rationale));
    if (o.summary) parts.push(el("p", {}, el("i", {}, o.summary)));
    if (o.signals) parts.push(table(["ticker", "signal", "confidence"], o.signals.map(x => [x.ticker, x.signal, x.confidence])));
    if (o.views) parts.push(table(["ticker", "signal", "conviction"], o.views.map(x => [x.ticker, x.signal, fmt(x.conviction, 2)])));
    if (o.points) parts.push(el("ul", {}, ...o.points.map(x => el("li", {}, x.text + " ",
      el("span", { class: "muted" }, "[" + (x.evidence_ids || []).join(", ") + "]")))));
    if (t.weights) parts.push(el("p", {}, el("b", {}, "Allocation: "), allocation(t.weights)));
    if (t.policy_notes && t.policy_notes.length) parts.push(el("p", { class: "muted" }, "Policy: " + t.policy_notes.join("; ")));
    // Fields the paper protocol's layout does not cover (the staged protocols' signals, rulings, maps …): shown as data.
    const shown = new Set(["thesis", "claims", "critiques", "critique_responses", "rationale", "allocation", "cash_weight",
                           "summary", "signals", "views", "points"]);
    const rest = Object.fromEntries(Object.entries(o).filter(([k]) => !shown.has(k)));
    if (Object.keys(rest).length) parts.push(el("details", parts.length <= 2 ? { open: "" } : {}, el("summary", {}, "other fields"),
      el("pre", { class: "memo" }, JSON.stringify(rest, null, 1))));
    return el("div", { class: "turn" }, ...parts);
  }

  function crit(list) {
    return table(["round", "agent", "ρ", "LV", "ES", "AC", "CA", "clips", "why"], (list || []).map(c => [
      String(c.round), c.agent + (c.label !== "crit" ? " (" + c.label + ")" : ""), fmt(c.rho),
      fmt(c.scores.logical_validity, 2), fmt(c.scores.evidential_support, 2), fmt(c.scores.alternative_consideration, 2),
      fmt(c.scores.causal_alignment, 2), (c.clips || []).join("; "),
      c.explanations ? Object.entries(c.explanations).map(([k, v]) => k + ": " + v).join(" | ") : "(not recorded)"]));
  }

  function render(run) {
    root.replaceChildren();
    root.appendChild(el("p", {}, el("b", {}, run.config + " on " + run.scenario_id), " · run " + run.run_id +
      " · status " + run.status + (run.error ? " · " + run.error : "")));
    blindNames = run.blind || {};
    if (run.blind) root.appendChild(section("Blind memo: the debate saw pseudonyms and relative dates",
      table(["pseudonym", "ticker"], Object.entries(run.blind).sort().map(([p, t]) => [p, t]))));
    const memo = run.memo && memos[run.memo.sha256];
    root.appendChild(section("Memo" + (run.memo ? " (as of " + run.memo.as_of + ", " + run.memo.n_items + " items)" : ""),
      el("pre", { class: "memo" }, memo || "The memo text is not stored in this trace.")));
    const byPhase = el("div", {});
    for (const t of run.turns) byPhase.appendChild(turn(t));
    root.appendChild(section("Debate (" + run.turns.length + " turns)", byPhase));
    root.appendChild(section("CRIT scores", crit(run.crit)));
    root.appendChild(section("Interventions and checks (" + run.interventions.filter(i => i.event === "intervention").length + " fired)",
      table(["event", "name", "round", "agent", "fired", "reason / action"], run.interventions.map(i => [
        i.event, i.name || "", String(i.round ?? ""), i.agent || "", i.fired === undefined ? "" : String(i.fired),
        [i.reason, i.action, i.verdict ? JSON.stringify(i.verdict) : ""].filter(Boolean).join(" · ")]))));
    root.appendChild(section("Controller", table(["round", "β before", "β after", "quadrant", "early stop"],
      run.controller.map(c => [String(c.round), fmt(c.beta_before), fmt(c.beta_after), c.quadrant || "", String(c.early_stop)]))));
    if (run.final) {
      const rows = [["final (" + run.final.method + ")", allocation(run.final.weights)]];
      root.appendChild(section("Final allocation", table(["", "weights"], rows)));
    }
    if (run.backtest) {
      const keys = ["total_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct"];
      const rows = [["portfolio", ...keys.map(k => fmt(run.backtest.metrics[k]))]];
      for (const [name, m] of Object.entries(run.backtest.baselines)) rows.push([name, ...keys.map(k => fmt(m[k]))]);
      root.appendChild(section("Backtest against the baselines", table(["", ...keys], rows)));
    }
  }

  const pick = document.getElementById("explorer-run");
  const filter = document.getElementById("explorer-config");
  const configs = [...new Set(runs.map(r => r.config))];
  filter.appendChild(el("option", { value: "" }, "all configurations"));
  for (const c of configs) filter.appendChild(el("option", { value: c }, c));
  function fill() {
    pick.replaceChildren();
    runs.forEach((r, i) => {
      if (!filter.value || r.config === filter.value)
        pick.appendChild(el("option", { value: String(i) }, r.scenario_id + " · " + r.config + " · " + r.status));
    });
    if (pick.options.length) render(runs[Number(pick.value)]);
  }
  filter.addEventListener("change", fill);
  pick.addEventListener("change", () => render(runs[Number(pick.value)]));
  fill();
})();
