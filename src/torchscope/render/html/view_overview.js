// @ts-check
// The Overview: cards, the step-time breakdown, recommendations, hot spots.
// The page inlines this file before app.js; it defines one global, viewOverview.

const viewOverview = (() => {
  const { none, fmtUs, fmtNs, fmtPct, fmtCount, fmt } = TorchscopeFormat;
  const { h, card, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { state, report, rep, run, col, nameCol, generic, recCard, warningsBox, stepLabel } = TorchscopePage;
  const { stackedBars } = TorchscopePlots;
  const DEVICE_CATS = ["Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other"];
  const HOST_CATS = ["Operators", "Communication", "DataLoader", "Optimizer", "Python outside ops", "Other"];

  function viewOverview() {
    const r = rep(), m = r.meta || {}, P = state.payload, steps = r.steps || [];
    /** @type {Node[]} */
    const out = [h("h2", {}, "Overview"), ...warningsBox()];
    const cards = [card("time span", fmtUs(m.span_us)), card("events", fmtCount(m.events)), card("steps", fmtCount(steps.reduce((/** @type {number} */ n, /** @type {Obj} */ x) => n + (x.steps || 1), 0)))];
    if (r.breakdown_us && r.breakdown_us.Total) cards.push(card("avg step", fmtUs(r.breakdown_us.Total)));
    (r.devices || []).forEach((/** @type {Obj} */ d) => {
      cards.push(card(`device ${d.device} utilization`, fmt(d.utilization, "fraction")));
      if (!none(d.sm_efficiency)) cards.push(card(`device ${d.device} est. SM efficiency`, fmt(d.sm_efficiency, "fraction")));
      if (!none(d.achieved_occupancy)) cards.push(card(`device ${d.device} est. occupancy`, fmt(d.achieved_occupancy, "fraction")));
    });
    if (!none(m.rank)) cards.push(card("rank", none(m.world_size) ? `${m.rank}` : `${m.rank} of ${m.world_size}`));
    if (P.run) cards.push(card("exit code", String(P.run.exit_code)));
    if (P.run && !none(P.run.setup_s)) cards.push(card("setup (before step 0)", fmtUs(P.run.setup_s * 1e6)));
    out.push(h("div", { class: "cards", "data-testid": "overview-cards" }, cards));
    // what the run says of itself (the schedule's steps, the cycles left out of the report, a
    // script's own profiler): the terminal said it, the page did not
    const runNotes = (P.run && P.run.notes) || [];
    if (runNotes.length) out.push(h("div", { class: "rec", "data-testid": "run-notes" }, h("div", { class: "t" }, "This run"), h("ul", {}, runNotes.map((/** @type {string} */ w) => h("li", {}, w)))));
    const hasDevice = steps.some((/** @type {Obj} */ x) => (x.breakdown_us.Kernel || 0) + (x.breakdown_us.Memcpy || 0) + (x.breakdown_us.Memset || 0) > 0);
    const cats = hasDevice ? DEVICE_CATS : HOST_CATS;
    const part = hasDevice ? "breakdown_us" : "host_breakdown_us";
    if (steps.length) {
      out.push(h("h3", {}, hasDevice ? "Step time breakdown" : "Step time breakdown (host)"));
      // above MAX_STEP_ROWS steps a row is a run of consecutive steps (their means): "1000–1099"
      const grouped = steps.some((/** @type {Obj} */ x) => (x.steps || 1) > 1);
      if (grouped) out.push(h("p", { class: "muted", "data-testid": "steps-grouped" }, `${fmtCount(steps.length)} runs of consecutive steps, each bar their mean step.`));
      out.push(stackedBars(steps.map((/** @type {Obj} */ x) => ({ step: stepLabel(x), ...x[part] })), cats, "step", { id: "step-chart", fmt: fmtUs }));
      const avg = r[part] || {};
      out.push(table([nameCol("cat", "category"), { key: "us", label: "avg per step", num: true, fmt: fmtUs }, { key: "pct", label: "share", num: true, fmt: fmtPct }],
        cats.map((c) => ({ cat: c, us: avg[c] || 0, pct: avg.Total ? (100 * (avg[c] || 0)) / avg.Total : null })), { id: "breakdown-table" }));
      if (m.steps_from_trace) {
        out.push(h("h3", {}, "Steps (start: time since the trace's first event)"));
        const rows = steps.map((/** @type {Obj} */ x) => ({ ...x, step: stepLabel(x) }));
        out.push(table([col("step", grouped ? "steps" : "step"), col("start_us", "start"), col("dur_us", grouped ? "mean duration" : "duration")], rows, { id: "steps-table" }));
      }
    } else out.push(empty("No step information in this trace."));
    // the shown trace's own findings, as the terminal shows them (a set's merged list, each
    // finding once for all its cycles or ranks, is in the Report tab)
    const set = (report() || {}).kind === "traceset";
    const recs = (set ? r.recommendations : (report() || {}).recommendations) || [];
    out.push(h("h3", {}, "Recommendations"));
    if (set) out.push(h("p", { class: "muted", "data-testid": "recommendations-of" }, `Findings of ${run().name}; those of the whole set are in the Report tab.`));
    out.push(recs.length ? h("div", { "data-testid": "recommendations" }, recs.map((/** @type {Obj} */ r) => recCard(r))) : h("div", { class: "muted", "data-testid": "recommendations" }, "No recommendations."));
    if (P.hotspots && P.hotspots.length) {
      const cycles = (state.payload.runs || []).length;
      out.push(h("h3", {}, `Python hot spots${cycles > 1 ? ` over all ${cycles} recorded cycles` : ""} (sampled; “outside ops” is time the op profiler does not see)`));
      out.push(table([
        { key: "function", label: "function", cls: "name" }, { key: "location", label: "location", cls: "name" },
        { key: "self_ns", label: "self", num: true, fmt: fmtNs }, { key: "total_ns", label: "total", num: true, fmt: fmtNs },
        { key: "total_pct", label: "total %", num: true, fmt: fmtPct }, { key: "outside_ops_pct", label: "outside ops", num: true, fmt: fmtPct },
      ], P.hotspots, { id: "hotspots-table", sort: "self_ns" }));
    }
    if (P.env) { out.push(h("h3", {}, "Environment")); out.push(generic(P.env, "env")); }
    return out;
  }

  return viewOverview;
})();
