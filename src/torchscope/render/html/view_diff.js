// @ts-check
// Diff: the step-time waterfall, the categories, the ops and kernels that changed.
// The page inlines this file before app.js; it defines one global, viewDiff.

const viewDiff = (() => {
  const { DASH, none, fmtUs, fmt } = TorchscopeFormat;
  const { h, card, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { state, nameCol } = TorchscopePage;
  function viewDiff() {
    const d = state.payload.diff;
    if (!d || !d.report) return [h("h2", {}, "Diff"), empty("Compare two traces with: torchscope diff A B --html diff.html")];
    const D = d.report, U = d.units || {}, st = D.step_us || {};
    const signed = (/** @type {any} */ v, /** @type {string} */ unit) => (none(v) ? DASH : h("span", { class: v > 0 ? "pos" : v < 0 ? "neg" : "" }, (v > 0 ? "+" : "") + fmt(v, unit)));
    /** @type {Node[]} */
    const out = [h("h2", {}, `Diff: ${d.a} → ${d.b}`),
      h("div", { class: "cards" }, card("step A", fmtUs(st.a)), card("step B", fmtUs(st.b)), card("change", (st.delta > 0 ? "+" : "") + fmtUs(st.delta)))];
    // how long each side's steps took, as the terminal says it (a mean can hide an outlier)
    const spread = [["A", st.a_steps], ["B", st.b_steps]].filter(([, x]) => x && x.longest > x.shortest)
      .map(([k, x]) => `${fmtUs(x.shortest)}–${fmtUs(x.longest)} in ${k} (median ${fmtUs(x.median)})`);
    if (spread.length)
      out.push(h("p", { class: st.within_spread ? "warn" : "muted", "data-testid": "diff-spread" }, "steps took " + spread.join(" and ")
        + (st.within_spread ? ": the change is smaller than that spread, so it may be the machine's jitter (compare the medians, or record more steps)" : "")));
    const cats = Object.entries(D.breakdown_us || {}).filter(([c]) => c !== "Total").map(([c, x]) => ({ category: c, ...x }));
    if (cats.length && !none(st.a) && !none(st.b)) {
      out.push(h("h3", {}, "Where the step time went: A's step, each category's change, B's step"));
      out.push(TorchscopeCharts.waterfall(cats, st.a, st.b, fmtUs, `A: ${d.a}`, `B: ${d.b}`));
    }
    if (cats.length) {
      out.push(h("h3", {}, "Step time by category (per step)"));
      out.push(table([nameCol("category", "category"), { key: "a", label: "A", num: true, fmt: fmtUs }, { key: "b", label: "B", num: true, fmt: fmtUs },
        { key: "delta", label: "change", num: true, fmt: (v) => signed(v, "us") }], cats, { id: "diff-breakdown" }));
    }
    out.push(h("h3", {}, "The ops and kernels that explain it (per step, biggest change first)"));
    if ((D.changes || []).some((/** @type {any} */ x) => x.noise))
      out.push(h("p", { class: "muted" }, `Dimmed: the same calls, and a change under ${fmtUs(st.noise_floor)} (1% of the step): likely the machine's jitter.`));
    out.push(table([nameCol("name", "name"), { key: "what", label: "what" }, { key: "status", label: "status" },
      { key: "a_calls", label: "calls A", num: true, fmt: (v) => fmt(v, U.a_calls) }, { key: "b_calls", label: "calls B", num: true, fmt: (v) => fmt(v, U.b_calls) },
      { key: "a_us", label: "A", num: true, fmt: (v) => fmt(v, U.a_us) }, { key: "b_us", label: "B", num: true, fmt: (v) => fmt(v, U.b_us) },
      { key: "delta_us", label: "change", num: true, fmt: (v) => signed(v, U.delta_us) }], D.changes || [], { id: "diff-table", rowClass: (x) => (x.noise ? "noise" : null) }));
    return out;
  }

  return viewDiff;
})();
