// @ts-check
// Timeline: timeline.js draws it; this gives it the report's steps and the memory curves.
// The page inlines this file before app.js; it defines one global, viewTimeline.

const viewTimeline = (() => {
  const { fmtNs, fmtBytes, none } = TorchscopeFormat;
  const { COLORS, h, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { run, rep, START, stepLabel } = TorchscopePage;
  // -- timeline: timeline.js draws it; the page gives it the report's steps and the memory curves
  function viewTimeline() {
    /** @type {TimelineData | undefined} */
    const t = run().timeline;
    if (!t || !t.events) return [h("h2", {}, "Timeline"), empty("No events with a duration.")];
    // a trace whose first event is at timestamp 0 (as generated traces are) has its start
    const start = none((rep().meta || {}).start_us) ? null : START();
    // a row for a run of consecutive steps (above MAX_STEP_ROWS) spans all of them
    const steps = (rep().steps || []).map((/** @type {Obj} */ x) => ({ step: stepLabel(x), start_ns: x.start_us * 1000 - t.t0_ns, dur_ns: ((x.steps || 1) > 1 ? x.end_us - x.start_us : x.dur_us) * 1000 }));
    if (start === null) steps.length = 0; // steps' timestamps need the trace's start
    const counters = (run().memory_curves || []).map((/** @type {Obj} */ c) => ({ name: `${c.device} allocated`, offset_us: c.allocated.offset_us, bytes: c.allocated.bytes }));
    const body = TorchscopeTimeline.view(t, { fmtNs, fmtBytes, steps, counters, colors: COLORS, tip: /** @type {HTMLElement} */ (document.querySelector("#tip")),
      table: (cols, rows, id) => table(cols, rows, { id, sort: "total_ns" }) });
    return [h("h2", {}, "Timeline"),
      h("div", { class: "muted" }, "W/S zoom, A/D pan (as Perfetto); wheel zooms at the pointer, drag pans, shift-drag selects a range; click an event for its details and its kernels or launching op; search with Enter (shift+Enter: previous)."),
      body, h("div", { class: "tl-tools" }, h("button", { "data-testid": "export-chrome", onclick: () => exportChrome(t) }, "export Chrome trace (Perfetto)"))];
  }
  async function exportChrome(/** @type {TimelineData} */ t) {
    const r = run();
    if (r.download) { const a = h("a", { href: r.download, download: "" }); document.body.appendChild(a); a.click(); a.remove(); return; }
    const E = await TorchscopeTimeline.decode(t), evs = [];
    for (let i = 0; i < t.events; i++) {
      const tr = t.tracks[E.track[i]];
      evs.push({ ph: "X", cat: t.kinds[E.kind[i]], name: t.names[E.name[i]], pid: tr.device >= 0 ? `device ${tr.device}` : tr.pid, tid: tr.tid,
        ts: (t.t0_ns + E.start[i]) / 1000, dur: E.dur[i] / 1000 });
    }
    const blob = new Blob([JSON.stringify({ traceEvents: evs, displayTimeUnit: "ms" })], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: (r.name || "trace") + ".chrome.json" });
    document.body.appendChild(a); a.click(); a.remove();
  }

  return viewTimeline;
})();
