// @ts-check
// Job (torchscope.job): one summary for many runs, ranks and cycles.
// The page inlines this file before app.js; it defines one global, viewJob.

const viewJob = (() => {
  const { fmtNs } = TorchscopeFormat;
  const { h, card } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { state, recCard } = TorchscopePage;
  // -- job view (torchscope.job): one summary for many runs, ranks and cycles ------------------
  // Self-contained: reads only payload.job (job.render.job_section); per-rank full views are
  // sibling HTML files named in job.runs[i].per_rank[j].views.
  /** Where a job's finding fired, as the terminal says it (job.render.run_lines).
   * @param {Obj} f @param {Obj} R */
  function where(f, R) {
    const perRank = f.of_ranks > 1 && f.scope !== "job";
    const parts = perRank ? [`on ${f.on_ranks} of ${f.of_ranks} ranks`] : [];
    const severalCycles = (f.on_cycles || 1) > 1 && R.cycles > 1;
    if (severalCycles) parts.push(f.scope === "job" || R.ranks === 1 ? `in ${f.on_cycles} cycles` : `${f.on_cycles} rank-cycles`);
    // the message is the worst instance's: whose, so its numbers read as that one's
    const whose = perRank ? [`rank ${f.worst_rank}`] : [];
    if (severalCycles && f.scope !== "job" && f.worst_cycle != null) whose.push(`cycle ${f.worst_cycle}`);
    return parts.join(", ") + (whose.length ? `; worst: ${whose.join(", ")}` : "");
  }
  function viewJob() {
    const J = state.payload.job || { runs: [] };
    /** @type {Node[]} */
    const out = [h("h2", {}, "Job")];
    // what the terminal prints after the runs (files skipped, collectives not matched, ranks of
    // different jobs): here first, where the page opens, not only on the Report tab
    const warnings = /** @type {string[]} */ (state.payload.warnings || []);
    if (warnings.length) out.push(h("details", { "data-testid": "job-warnings" }, h("summary", { class: "warn" }, `${warnings.length} warning${warnings.length === 1 ? "" : "s"}`), h("ul", {}, warnings.map((w) => h("li", {}, w)))));
    J.runs.forEach((/** @type {Obj} */ R) => {
      const st = R.step_ns || {};
      // as the terminal's header (job.render.run_lines): ranks read, and those that could not be
      const unread = (R.ranks_unread || []).length;
      const ranks = `${R.ranks} rank${R.ranks === 1 ? "" : "s"}` + (unread ? ` read (${unread} more could not be: see the warnings)` : R.world_size && R.world_size !== R.ranks ? ` of ${R.world_size}` : "");
      out.push(h("h3", { "data-testid": "job-run" }, `${R.run}: ${ranks}, ${R.cycles} cycle${R.cycles === 1 ? "" : "s"}` + (R.backend ? `, ${R.backend}` : "")));
      // the steps themselves (over every rank and cycle): the longest step is the real one, never a median
      const ev = R.steps_ns || { count: 0 };
      const at = [R.ranks > 1 && ev.max_rank !== null ? `rank ${ev.max_rank}` : "", R.cycles > 1 && ev.max_cycle !== null ? `cycle ${ev.max_cycle}` : ""].filter(Boolean).join(", ");
      const stepCards = [card("shortest step", fmtNs(ev.min)), card(`median step (${ev.count} steps)`, fmtNs(ev.median)),
        card("longest step", fmtNs(ev.max) + (at ? ` (${at})` : ""))];
      // with several ranks, also each rank's median step as a distribution (who is fast, who is slow)
      const rankCards = R.ranks > 1 ? [card("fastest rank (its median step)", fmtNs(st.min) + (st.min_rank !== null ? ` (rank ${st.min_rank})` : "")),
        card("slowest rank (its median step)", fmtNs(st.max) + (st.max_rank !== null ? ` (rank ${st.max_rank})` : ""))] : [];
      out.push(h("div", { class: "cards" }, [...stepCards, ...rankCards,
        card("straggler", R.straggler ? `rank ${R.straggler.rank}` : "none"),
        card("wait per step", R.straggler ? fmtNs(R.straggler.wait_per_step_ns) : "–")]));
      // the median rank's mean step by category: the terminal's line, as a table
      const base = R.median_breakdown_ns || {};
      const cats = (R.categories || Object.keys(base)).filter((/** @type {string} */ c) => c !== "Total");
      const total = base.Total || cats.reduce((/** @type {number} */ s, /** @type {string} */ c) => s + (base[c] || 0), 0) || 1;
      out.push(h("h4", {}, (R.ranks > 1 ? `Median rank's (rank ${R.median_rank}) mean step` : "Mean step") + " by category"));
      out.push(table([{ key: "category", label: "category", cls: "name" }, { key: "mean_ns", label: "per step", num: true, fmt: fmtNs },
        { key: "share", label: "share of the step", num: true, fmt: (/** @type {number} */ v) => `${v.toFixed(0)}%` }],
        cats.filter((/** @type {string} */ c) => (base[c] || 0) > 0).map((/** @type {string} */ c) => ({ category: c, mean_ns: base[c], share: 100 * base[c] / total })),
        { id: "job-categories", sort: "mean_ns" }));
      if (R.straggler) {
        out.push(h("h4", {}, `Rank ${R.straggler.rank} arrives last at ${R.straggler.last} of ${R.straggler.matched} collectives; it spends more on`));
        out.push(table([{ key: "name", label: "op / kernel / category", cls: "name" }, { key: "rank_ns", label: "on the straggler", num: true, fmt: fmtNs },
          { key: "median_ns", label: "other ranks' median", num: true, fmt: (v, r) => (r.median_is_bound ? "≤ " : "") + fmtNs(v) }, { key: "excess_ns", label: "excess per step", num: true, fmt: fmtNs }],
          [...R.straggler.ops, ...R.straggler.kernels, ...R.straggler.categories], { id: "job-straggler", sort: "excess_ns" }));
      }
      if ((R.collectives || []).length) {
        out.push(h("h4", {}, "Collectives (aligned across ranks)"));
        out.push(table([{ key: "group", label: "group", cls: "name" }, { key: "name", label: "collective", cls: "name" }, { key: "count", label: "count", num: true },
          { key: "median_duration_ns", label: "median duration", num: true, fmt: fmtNs }, { key: "mean_skew_ns", label: "mean arrival skew", num: true, fmt: fmtNs },
          { key: "max_skew_ns", label: "max skew", num: true, fmt: fmtNs }, { key: "mean_wait_ns", label: "mean wait", num: true, fmt: fmtNs }], R.collectives, { id: "job-collectives" }));
      }
      const waits = Object.fromEntries((R.rank_waits || []).map((/** @type {Obj} */ w) => [w.rank, w]));
      out.push(h("h4", {}, "Ranks"));
      out.push(table([{ key: "rank", label: "rank", num: true }, { key: "steps", label: "steps", num: true }, { key: "step_ns", label: "median step", num: true, fmt: fmtNs },
        { key: "last", label: "arrived last", num: true }, { key: "wait_ns", label: "waited (all its steps)", num: true, fmt: fmtNs },
        { key: "findings", label: "findings", cls: "name" }, { key: "view", label: "full view", cls: "name" }],
        (R.per_rank || []).map((/** @type {Obj} */ p) => ({ ...p, last: (waits[p.rank] || {}).last, wait_ns: (waits[p.rank] || {}).wait_ns, findings: (p.findings || []).join(", "),
          view: (p.views || []).length ? h("span", {}, p.views.map((/** @type {any} */ v) => h("a", { href: v }, v + " "))) : "" })), { id: "job-ranks", sort: "rank", asc: true }));
      // the ranks whose median step is far from the job's median, as the terminal lists them
      if ((R.outliers || []).length) {
        out.push(h("h4", {}, "Outlier ranks"));
        out.push(table([{ key: "rank", label: "rank", num: true }, { key: "step_ns", label: "median step", num: true, fmt: fmtNs },
          { key: "vs_median_pct", label: "vs the median rank", num: true, fmt: (/** @type {number} */ v) => `${v >= 0 ? "+" : ""}${v.toFixed(0)}%` },
          { key: "differs", label: "differs most in", cls: "name" }],
          R.outliers.map((/** @type {Obj} */ o) => ({ ...o, differs: Object.entries(o.by_category_ns || {})
            .sort((a, b) => Math.abs(/** @type {number} */ (b[1])) - Math.abs(/** @type {number} */ (a[1]))).slice(0, 3)
            .map(([c, v]) => `${c} ${/** @type {number} */ (v) >= 0 ? "+" : "-"}${fmtNs(Math.abs(/** @type {number} */ (v)))}`).join(", ") })),
          { id: "job-outliers", sort: "rank", asc: true }));
      }
      if ((R.cycle_table || []).length > 1) {
        out.push(h("h4", {}, "Cycles"));
        // the file beside the number: torchscope run names its cycles step_N, the job numbers them
        out.push(table([{ key: "cycle", label: "cycle", num: true }, { key: "file_name", label: "file", cls: "name" }, { key: "ranks", label: "ranks", num: true }, { key: "steps", label: "steps", num: true },
          { key: "min_step_ns", label: "shortest step", num: true, fmt: fmtNs }, { key: "median_step_ns", label: "median step", num: true, fmt: fmtNs },
          { key: "max_step_ns", label: "longest step", num: true, fmt: fmtNs }, { key: "slowest_rank", label: "rank of the longest", num: true },
          { key: "findings", label: "findings", cls: "name" }, { key: "note", label: "note", cls: "name" }],
          (R.cycle_table || []).map((/** @type {Obj} */ c) => ({ ...c, file_name: String(c.file || "").split(/[\\/]/).pop() })).map((/** @type {Obj} */ c) => c.left_out || !c.steps
            ? { ...c, min_step_ns: null, median_step_ns: null, max_step_ns: null, slowest_rank: null, findings: "", note: c.note || "" }
            : { ...c, findings: (c.findings || []).join(", "), note: c.note || "" }), { id: "job-cycles" }));
      }
      out.push(h("h4", {}, "Recommendations"));
      out.push((R.recommendations || []).length ? h("div", { "data-testid": "job-recommendations" }, R.recommendations.map((/** @type {Obj} */ f) => {
        const at = where(f, R);
        return recCard({ rule: f.rule + (at ? ` (${at})` : ""), message: f.message, fix: f.fix, evidence: f.evidence }, R.units);
      }))
        : h("div", { class: "muted" }, "No recommendations."));
    });
    return out;
  }

  return viewJob;
})();
