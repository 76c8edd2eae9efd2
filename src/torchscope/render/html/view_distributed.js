// @ts-check
// Distributed: per rank, or computation/communication per step for one trace.
// The page inlines this file before app.js; it defines one global, viewDistributed.

const viewDistributed = (() => {
  const { none, fmtUs } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { report, rep, col, nameCol, generic, stepLabel } = TorchscopePage;
  const { stackedBars } = TorchscopePlots;
  function viewDistributed() {
    const R = report() || {}, d = R.distributed;
    /** @type {Node[]} */
    const out = [h("h2", {}, "Distributed")];
    // one trace, or one process's cycles (`torchscope run`): no ranks to compare
    if (!d || !(d.ranks || []).length) {
      const steps = rep().steps || [];
      if (!steps.some((/** @type {Obj} */ x) => x.comm_overlap_us.communication_us)) return [...out, empty("One trace without communication; no per-rank data.")];
      out.push(h("h3", {}, "Computation and communication per step"));
      out.push(stackedBars(steps.map((/** @type {Obj} */ x) => ({ step: stepLabel(x), ...x.comm_overlap_us })), ["computation_us", "communication_us", "overlap_us", "other_us"], "step", { id: "dist-chart", fmt: fmtUs }));
      return out;
    }
    out.push(stackedBars(d.ranks.map((/** @type {Obj} */ x) => ({ ...x, run: x.rank })), ["computation_us", "communication_us"], "run", { id: "dist-chart", fmt: fmtUs }));
    out.push(table([nameCol("name", "run"), col("rank", "rank"), col("steps", "steps"), col("step_us", "avg step"),
      col("computation_us", "computation"), col("communication_us", "communication"), col("overlap_us", "overlap"),
      col("vs_fastest_pct", "vs fastest"), { key: "straggler", label: "straggler", fmt: (v) => (v ? "yes" : "") }], d.ranks, { id: "dist-table" }));
    if (!none(d.slowest_rank)) out.push(h("div", { class: "rec" }, h("div", { class: "t" }, `Slowest rank (most computation per step): ${d.slowest_rank}`)));
    if ((d.collectives || []).length) out.push(h("h3", {}, "Collectives"), generic(d.collectives, "collectives"));
    if ((d.wait_for_slowest || []).length) out.push(h("h3", {}, "Time waiting for the slowest rank"), generic(d.wait_for_slowest, "wait_for_slowest"));
    return out;
  }

  return viewDistributed;
})();
