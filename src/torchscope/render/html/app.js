// @ts-check
// torchscope dashboard: one front-end for both transports (embedded JSON, or `torchscope serve`).
// Our own vanilla JS. Every string from a trace reaches the page through textContent or an SVG
// text node, never through innerHTML, so op names and labels cannot inject markup. This is the
// shell (tabs, the run picker, the serve transport); each view is its own file (view_*.js), the
// page's state is page.js's, and __init__.py inlines them all, in order, before this one.
"use strict";
(function () {
  /** An element of index.html, which has every id asked for here. @param {string} sel */
  const $ = (sel) => /** @type {HTMLElement} */ (document.querySelector(sel));
  /** @type {Obj} */
  const DATA = JSON.parse($("#torchscope-data").textContent || "{}");
  const { state, run, report, accuracy } = TorchscopePage;
  const { h, empty } = TorchscopeDom;
  /** @typedef {[string, string, () => Node[], () => boolean]} Tab id, label, render, shown */
  // a job's page holds the job summary only (no trace of its own): the per-trace tabs would say
  // "no steps", "CPU-only run" about a GPU job, so they are not offered (each rank's full view is
  // its own page, `report DIR --rank-views`)
  const trace = () => !state.payload.job;
  /** @type {Tab[]} */
  const VIEWS = [
    ["job", "Job", viewJob, () => !!state.payload.job],
    ["overview", "Overview", viewOverview, trace],
    ["operators", "Operators", viewOperators, trace],
    ["kernels", "Kernels", viewKernels, trace],
    ["memory", "Memory", viewMemory, trace],
    ["modules", "Modules", viewModules, trace],
    ["distributed", "Distributed", viewDistributed, trace],
    ["diff", "Diff", viewDiff, () => !!state.payload.diff],
    ["timeline", "Timeline", viewTimeline, trace],
    ["flame", "Flame", () => TorchscopeFlame.view(run().flame, state.payload.hotspots_flame, (state.payload.diff || {}).flame), trace],
    ["accuracy", "Accuracy", viewAccuracy, () => !!accuracy()],
    ["report", "Report", viewReport, () => !!report()],
  ];
  function render() {
    const P = state.payload;
    $("#title").textContent = P.title || "";
    const tabs = VIEWS.filter((v) => v[3]());
    if (!tabs.find((v) => v[0] === state.view)) state.view = P.job ? "job" : "overview";
    $("#tabs").replaceChildren(...tabs.map(([id, label]) => h("button", { class: id === state.view ? "on" : null, "data-view": id,
      onclick: () => { state.view = id; location.hash = id; render(); } }, label)));
    const v = /** @type {Tab} */ (tabs.find((x) => x[0] === state.view));
    const t0 = performance.now();
    $("#view").replaceChildren(...v[2]());
    $("#view").dataset.rendered = state.view;
    if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = String(Math.round(performance.now()));
    $("#view").dataset.renderMs = String(Math.round(performance.now() - t0));
  }
  /** @param {string[]} names */
  function runSelect(names) {
    const sel = $("#run-select");
    sel.replaceChildren(...names.map((n, i) => h("option", { value: i, selected: i === state.run ? true : null }, n)));
    /** @type {HTMLElement} */ (sel.parentElement).hidden = names.length < 2;
  }
  /** @param {Obj} P @returns {number} */
  function latestWithStep(P) {
    const cycles = (P.report || {}).ranks || {};
    for (let i = P.runs.length - 1; i >= 0; i--) if (((cycles[P.runs[i].name] || {}).meta || {}).steps_from_trace) return i;
    return P.runs.length - 1;
  }
  /** @param {Obj} P */
  function showPayload(P) {
    // a torchscope run of several cycles opens on the latest with a step, the one its terminal
    // shows in full (the first holds the setup; a last one the script ended in may hold no
    // step); a later payload (serve) keeps the user's choice
    if (state.payload === EMPTY && P.run && (P.runs || []).length > 1) state.run = latestWithStep(P);
    state.payload = P;
    if (P.job && location.hash.length <= 1) state.view = "job";  // a job opens on its summary
    if (state.run >= (P.runs || []).length) state.run = 0;
    if (DATA.transport !== "serve") runSelect((P.runs || []).map((/** @type {Obj} */ r) => r.name));
    render();
  }
  const EMPTY = state.payload;

  // serve transport: list the log directory's traces, load one, poll for new ones
  async function serveMain() {
    const sel = /** @type {HTMLSelectElement} */ ($("#run-select"));
    /** @type {string | null} */
    let current = null;
    /** what the open entry was when loaded (name, size, mtime): a change reloads it */
    let loadedAs = "";
    /** @param {Obj | undefined} r */
    const signature = (r) => (r ? JSON.stringify([r.name, r.size, r.mtime]) : "");
    async function poll() {
      const res = await fetch("api/runs", { cache: "no-store" });
      const list = await res.json();
      const before = state.runs.length;
      state.runs = list.runs;
      const keep = current;
      sel.replaceChildren(...list.runs.map((/** @type {Obj} */ r) => h("option", { value: r.id, selected: r.id === keep ? true : null }, r.name)));
      /** @type {HTMLElement} */ (sel.parentElement).hidden = false;
      const jobs = list.runs.filter((/** @type {Obj} */ r) => r.kind === "job").length;
      $("#live").textContent = `${list.runs.length - jobs} traces` + (jobs ? ` (${jobs} job${jobs > 1 ? "s" : ""} of several)` : "")
        + ` in ${list.logdir}` + (before && list.runs.length > before ? " · new traces arrived" : "");
      if (!list.runs.length) {
        current = null;
        clear("No traces yet; this page refreshes as they arrive.");
        return;
      }
      const open = list.runs.find((/** @type {Obj} */ r) => r.id === current);
      if (current === null) await load(list.runs[0].id);
      else if (!open) {  // the open trace left the directory: never keep showing what is gone
        current = null;
        clear("The trace shown was removed from the log directory; pick another above.");
        sel.selectedIndex = -1;
      } else if (signature(open) !== loadedAs) await load(open.id);  // its files changed
    }
    /** No payload: the tabs go with it (they would show the previous trace). @param {string} message */
    function clear(message) {
      state.payload = EMPTY;
      $("#tabs").replaceChildren();
      $("#view").replaceChildren(empty(message));
    }
    /** @param {string} id */
    async function load(id) {
      current = id;
      loadedAs = signature(state.runs.find((/** @type {Obj} */ r) => r.id === id));
      $("#view").replaceChildren(empty("Loading…"));
      const res = await fetch("api/payload?id=" + encodeURIComponent(id), { cache: "no-store" });
      if (!res.ok) { clear(`Could not load: ${await res.text()}`); return; }
      const P = await res.json();
      (P.runs || []).forEach((/** @type {Obj} */ r) => { r.download = "api/file?id=" + encodeURIComponent(id); });
      state.run = 0;
      showPayload(P);
    }
    sel.addEventListener("change", () => load(sel.value));
    await poll();
    setInterval(() => poll().catch(() => { $("#live").textContent = "server not reachable"; }), DATA.poll_ms || 5000);
  }

  $("#run-select").addEventListener("change", (e) => {
    if (DATA.transport !== "serve") { state.run = Number(/** @type {HTMLSelectElement} */ (e.target).value); render(); }
  });
  if (location.hash.length > 1) state.view = location.hash.slice(1);
  if (DATA.transport === "serve") serveMain();
  else showPayload(DATA);
})();
