// torchscope dashboard: one front-end for both transports (embedded JSON, or `torchscope serve`).
// Our own vanilla JS. Every string from a trace reaches the page through textContent or an SVG
// text node, never through innerHTML, so op names and labels cannot inject markup.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("torchscope-data").textContent);
  const $ = (sel) => document.querySelector(sel);
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#3b5bdb", "#f08c00", "#2f9e44", "#e03131", "#7048e8", "#1098ad", "#d6336c", "#868e96", "#5c940d", "#ae3ec9"];
  const state = { payload: null, run: 0, view: "overview", runs: [] };

  // -- building blocks ------------------------------------------------------------------
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = String(v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  function s(tag, attrs, text) {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = String(text);
    return el;
  }
  function fmtNs(ns) {
    if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "–";
    const a = Math.abs(b), u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, v = a;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (b < 0 ? "-" : "") + (i ? v.toFixed(2) : v) + " " + u[i];
  }
  const fmtPct = (p) => (p === null || p === undefined ? "–" : Number(p).toFixed(1) + " %");
  const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const fmtFrac = (f) => (f === null || f === undefined ? "–" : (100 * f).toFixed(1) + " %");
  // a plain number: whole ones grouped, fractions with three significant digits at most
  const fmtNum = (v) => (Number.isInteger(v) ? fmtInt(v) : Math.abs(v) >= 100 ? fmtInt(Math.round(v)) : String(Number(v.toPrecision(3))));
  // a JSON key as a column or legend label: the unit suffix goes (the formatted value shows it)
  const pretty = (k) => String(k).replace(/_(ns|us|pct|bytes)$/, "").replace(/_/g, " ");
  function decode(b64, Type) {
    const bin = atob(b64 || "");
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  function card(k, v) { return h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v)); }
  function empty(msg) { return h("div", { class: "empty" }, msg); }

  // A sortable, filterable table. cols: [{key, label, fmt, num, cls}]
  function table(cols, rows, opts) {
    opts = opts || {};
    let sortKey = opts.sort || null, desc = true, filter = "";
    const box = h("div", { class: "tablebox" });
    const count = h("span", { class: "muted" });
    const input = h("input", { class: "filter", placeholder: "filter by name…", "data-testid": "filter",
      oninput: (e) => { filter = e.target.value.toLowerCase(); draw(); } });
    function draw() {
      let r = rows;
      if (filter) r = r.filter((x) => cols.some((c) => !c.num && String(x[c.key] ?? "").toLowerCase().includes(filter)));
      if (sortKey) {
        const c = cols.find((c) => c.key === sortKey);
        r = r.slice().sort((a, b) => {
          const va = a[sortKey], vb = b[sortKey];
          let d = c && c.num ? (Number(va ?? -Infinity) - Number(vb ?? -Infinity)) : String(va ?? "").localeCompare(String(vb ?? ""));
          return desc ? -d : d;
        });
      }
      const head = h("tr", {}, cols.map((c) => h("th", {
        class: [c.num ? "num" : "", c.key === sortKey ? (desc ? "sorted-desc" : "sorted-asc") : ""].join(" ").trim() || null,
        "data-key": c.key,
        onclick: () => { if (sortKey === c.key) desc = !desc; else { sortKey = c.key; desc = !!c.num; } draw(); },
      }, c.label)));
      const body = r.slice(0, opts.limit || 1000).map((x) => h("tr", {}, cols.map((c) => {
        const v = x[c.key];
        return h("td", { class: c.num ? "num" : (c.cls || null) }, c.fmt ? c.fmt(v, x) : (v ?? "–"));
      })));
      box.replaceChildren(h("table", { class: "grid", "data-testid": opts.id || "table" }, h("thead", {}, head), h("tbody", {}, body)));
      count.textContent = ` ${r.length} of ${rows.length} rows`;
    }
    draw();
    return h("div", {}, input, count, box);
  }

  // Anything: objects as key/value lists, lists of objects as tables, the rest as text.
  function generic(v, depth) {
    depth = depth || 0;
    if (v === null || v === undefined) return h("span", { class: "muted" }, "–");
    if (Array.isArray(v)) {
      if (v.length && v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
        const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
        const simple = keys.filter((k) => v.every((x) => x[k] === null || x[k] === undefined || typeof x[k] !== "object"));
        const cols = simple.map((k) => ({ key: k, label: pretty(k), num: v.some((x) => typeof x[k] === "number"), fmt: numFmt(k) }));
        if (cols.length) return table(cols, v, { id: "generic-table" });
      }
      return h("pre", { class: "raw" }, JSON.stringify(v, null, 1).slice(0, 20000));
    }
    if (typeof v === "object") {
      if (depth > 3) return h("pre", { class: "raw" }, JSON.stringify(v, null, 1).slice(0, 20000));
      return h("dl", { class: "kv" }, Object.entries(v).flatMap(([k, x]) => [h("dt", {}, k), h("dd", {}, generic(x, depth + 1))]));
    }
    if (typeof v === "number") return document.createTextNode(fmtNum(v));
    return document.createTextNode(String(v));
  }
  function numFmt(key) {
    if (/_ns$|^ns$|time/.test(key)) return (v) => (typeof v === "number" ? fmtNs(v) : v ?? "–");
    if (/_us$|^us$/.test(key)) return (v) => (typeof v === "number" ? fmtNs(v * 1e3) : v ?? "–");
    if (/bytes$/.test(key)) return (v) => (typeof v === "number" ? fmtBytes(v) : v ?? "–");
    if (/pct$|percent/.test(key)) return (v) => (typeof v === "number" ? fmtPct(v) : v ?? "–");
    return (v) => (typeof v === "number" ? fmtNum(v) : v ?? "–");
  }

  // -- charts ----------------------------------------------------------------------------
  function legend(names) {
    return h("div", { class: "legend" }, names.map((n, i) => h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), n)));
  }
  function stackedBars(rows, cats, xKey, opts) {
    const W = 900, H = 240, L = 70, B = 24, n = rows.length;
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-testid": opts.id });
    const max = Math.max(1, ...rows.map((r) => cats.reduce((a, c) => a + (r[c] || 0), 0)));
    const bw = Math.max(1, (W - L - 10) / Math.max(n, 1));
    for (let t = 0; t <= 4; t++) {
      const y = H - B - (t / 4) * (H - B - 10);
      svg.appendChild(s("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#eee" }));
      svg.appendChild(s("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, opts.fmt((t / 4) * max)));
    }
    rows.forEach((r, i) => {
      let y = H - B;
      cats.forEach((c, j) => {
        const hgt = ((r[c] || 0) / max) * (H - B - 10);
        if (hgt > 0) {
          const rect = s("rect", { x: L + i * bw + 1, y: y - hgt, width: Math.max(1, bw - 2), height: hgt, fill: COLORS[j % COLORS.length] });
          rect.appendChild(s("title", {}, `${xKey} ${r[xKey]} · ${pretty(c)}: ${opts.fmt(r[c])}`));
          svg.appendChild(rect);
          y -= hgt;
        }
      });
      if (n <= 40 || i % Math.ceil(n / 20) === 0) svg.appendChild(s("text", { x: L + i * bw + bw / 2, y: H - 8, "text-anchor": "middle" }, r[xKey]));
    });
    return h("div", {}, legend(cats.map(pretty)), svg);
  }
  function hbars(items, fmt, id) {
    const W = 900, row = 20, L = 330, max = Math.max(1, ...items.map((x) => x.v));
    const svg = s("svg", { width: W, height: items.length * row + 6, "data-testid": id });
    items.forEach((x, i) => {
      const label = x.k.length > 52 ? x.k.slice(0, 50) + "…" : x.k;
      svg.appendChild(s("text", { x: L - 6, y: i * row + 14, "text-anchor": "end" }, label));
      const w = ((W - L - 90) * x.v) / max;
      const r = s("rect", { x: L, y: i * row + 4, width: Math.max(1, w), height: row - 6, fill: COLORS[0] });
      r.appendChild(s("title", {}, x.k));
      svg.appendChild(r);
      svg.appendChild(s("text", { x: L + w + 6, y: i * row + 14 }, fmt(x.v)));
    });
    return svg;
  }
  function lineChart(series, opts) {
    const W = 900, H = 260, L = 80, B = 24;
    const svg = s("svg", { width: W, height: H, "data-testid": opts.id });
    const xs = series.flatMap((x) => x.ts), ys = series.flatMap((x) => x.v);
    if (!xs.length) return empty("no samples");
    const x0 = Math.min(...xs), x1 = Math.max(...xs), ymax = Math.max(1, ...ys);
    const X = (t) => L + ((t - x0) / Math.max(1, x1 - x0)) * (W - L - 10);
    const Y = (v) => H - B - (v / ymax) * (H - B - 10);
    for (let t = 0; t <= 4; t++) {
      svg.appendChild(s("line", { x1: L, x2: W, y1: Y((t / 4) * ymax), y2: Y((t / 4) * ymax), stroke: "#eee" }));
      svg.appendChild(s("text", { x: L - 6, y: Y((t / 4) * ymax) + 4, "text-anchor": "end" }, opts.fmtY((t / 4) * ymax)));
    }
    svg.appendChild(s("text", { x: L, y: H - 6 }, "0"));
    svg.appendChild(s("text", { x: W - 10, y: H - 6, "text-anchor": "end" }, fmtNs(x1 - x0)));
    series.forEach((ser, j) => {
      let d = "";
      for (let i = 0; i < ser.ts.length; i++) {
        const x = X(ser.ts[i]).toFixed(1), y = Y(ser.v[i]).toFixed(1);
        d += (i ? (" H" + x + " V" + y) : ("M" + x + " " + y));
      }
      svg.appendChild(s("path", { d, fill: "none", stroke: COLORS[j % COLORS.length], "stroke-width": 1.5 }));
    });
    return h("div", {}, legend(series.map((x) => x.name)), svg);
  }

  // -- views -----------------------------------------------------------------------------
  const run = () => (state.payload.runs || [])[state.run] || {};
  const report = () => state.payload.report || null;

  function recommendations() {
    const r = report() || {};
    const cands = [r.recommendations, r.findings, r.advice, r.advisor, state.payload.recommendations];
    let recs = cands.find((x) => Array.isArray(x)) || [];
    if (!Array.isArray(recs) && recs && typeof recs === "object") recs = Object.values(recs);
    return recs;
  }
  function recCard(rec) {
    if (typeof rec !== "object" || rec === null) return h("div", { class: "rec" }, String(rec));
    const title = rec.title || rec.name || rec.rule || rec.id || "finding";
    const msg = rec.message || rec.summary || rec.text || rec.description || rec.fix || "";
    const rest = Object.fromEntries(Object.entries(rec).filter(([k]) => !["title", "name", "rule", "id", "message", "summary", "text", "description", "fix"].includes(k)));
    return h("div", { class: "rec", "data-testid": "recommendation" },
      h("div", { class: "t" }, title + (rec.rank !== undefined && rec.rank !== null ? ` (rank ${rec.rank})` : "")), msg ? h("div", {}, msg) : null,
      rec.fix ? h("div", {}, h("b", {}, "Fix: "), String(rec.fix)) : null,
      Object.keys(rest).length ? h("details", {}, h("summary", {}, "evidence"), generic(rest, 1)) : null);
  }

  function viewOverview() {
    const r = run(), sm = r.summary || {}, ov = r.overview || {}, P = state.payload;
    const out = [h("h2", {}, "Overview")];
    const cards = [card("time span", fmtNs(sm.span_ns)), card("events", fmtInt(sm.events)), card("steps", fmtInt((ov.steps || []).length || sm.steps))];
    if (ov.breakdown_ns && ov.breakdown_ns.Total) cards.push(card("avg step", fmtNs(ov.breakdown_ns.Total)));
    (ov.devices || []).forEach((d) => {
      cards.push(card(`device ${d.device} utilization`, fmtFrac(d.utilization)));
      if (d.sm_efficiency !== null && d.sm_efficiency !== undefined) cards.push(card(`device ${d.device} est. SM efficiency`, fmtFrac(d.sm_efficiency)));
      if (d.achieved_occupancy !== null && d.achieved_occupancy !== undefined) cards.push(card(`device ${d.device} est. occupancy`, fmtFrac(d.achieved_occupancy)));
    });
    if (sm.rank !== null && sm.rank !== undefined) cards.push(card("rank", `${sm.rank} of ${sm.world_size ?? "?"}`));
    if (P.run) cards.push(card("exit code", String(P.run.exit_code)));
    if (P.run && P.run.setup_s !== null && P.run.setup_s !== undefined) cards.push(card("setup (before step 0)", fmtNs(P.run.setup_s * 1e9)));
    out.push(h("div", { class: "cards", "data-testid": "overview-cards" }, cards));
    const steps = ov.steps || [];
    const hasDevice = steps.some((x) => (x.Kernel || 0) + (x.Memcpy || 0) + (x.Memset || 0) > 0);
    const cats = hasDevice ? ["Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other"]
      : ["Operators", "DataLoader", "Optimizer", "Python outside ops", "Other"];
    const rows = hasDevice ? steps : (ov.host_steps || []);
    if (rows.length) {
      out.push(h("h3", {}, hasDevice ? "Step time breakdown" : "Step time breakdown (host)"));
      out.push(stackedBars(rows, cats, "step", { id: "step-chart", fmt: fmtNs }));
      const avg = hasDevice ? ov.breakdown_ns : ov.host_breakdown_ns;
      if (avg) out.push(table([{ key: "cat", label: "category" }, { key: "ns", label: "avg per step", num: true, fmt: fmtNs }, { key: "pct", label: "share", num: true, fmt: fmtPct }],
        cats.map((c) => ({ cat: c, ns: avg[c] || 0, pct: avg.Total ? (100 * (avg[c] || 0)) / avg.Total : null })), { id: "breakdown-table" }));
    } else out.push(empty("No step information (the overview analysis is not available for this trace)."));
    const recs = recommendations();
    out.push(h("h3", {}, "Recommendations"));
    out.push(recs.length ? h("div", { "data-testid": "recommendations" }, recs.map(recCard)) : h("div", { class: "muted", "data-testid": "recommendations" }, "No recommendations."));
    if (P.hotspots && P.hotspots.length) {
      out.push(h("h3", {}, "Python hot spots (sampled; “outside ops” is time the op profiler does not see)"));
      out.push(table([
        { key: "function", label: "function", cls: "name" }, { key: "location", label: "location", cls: "name" },
        { key: "self_ns", label: "self", num: true, fmt: fmtNs }, { key: "total_ns", label: "total", num: true, fmt: fmtNs },
        { key: "total_pct", label: "total %", num: true, fmt: fmtPct }, { key: "outside_ops_pct", label: "outside ops", num: true, fmt: fmtPct },
      ], P.hotspots, { id: "hotspots-table", sort: "self_ns" }));
    }
    if (P.env) { out.push(h("h3", {}, "Environment")); out.push(generic(P.env)); }
    if ((P.warnings || []).length) out.push(h("details", {}, h("summary", { class: "warn" }, `${P.warnings.length} warnings`), h("ul", {}, P.warnings.map((w) => h("li", {}, w)))));
    return out;
  }

  // A section of the analyses' report for the current run, rendered generically when present.
  function reportPart(title, ...path) {
    let r = report();
    if (r && r.kind === "traceset" && r.ranks) r = r.ranks[run().name] || r;
    for (const k of path) r = r && typeof r === "object" ? r[k] : undefined;
    if (r === undefined || r === null || (Array.isArray(r) && !r.length)) return [];
    return [h("h3", {}, title), generic(r)];
  }

  function viewOperators() {
    const ops = run().ops || [];
    if (!ops.length) return [h("h2", {}, "Operators"), empty("No host operators in this trace.")];
    return [h("h2", {}, "Operators"),
      hbars(ops.slice(0, 12).map((o) => ({ k: o.name, v: o.self_ns })), fmtNs, "ops-chart"),
      table([
        { key: "name", label: "name", cls: "name" }, { key: "kind", label: "kind" }, { key: "calls", label: "calls", num: true, fmt: fmtInt },
        { key: "self_ns", label: "host self", num: true, fmt: fmtNs }, { key: "total_ns", label: "host total", num: true, fmt: fmtNs },
        { key: "avg_ns", label: "avg", num: true, fmt: fmtNs }, { key: "max_ns", label: "max", num: true, fmt: fmtNs },
        { key: "device_self_ns", label: "device self", num: true, fmt: fmtNs },
      ], ops, { id: "ops-table", sort: "self_ns" })];
  }

  function viewKernels() {
    const ks = run().kernels || [];
    if (!ks.length) return [h("h2", {}, "Kernels"), empty("No device activity in this trace (CPU-only run).")];
    return [h("h2", {}, "Kernels"),
      hbars(ks.slice(0, 12).map((k) => ({ k: k.name, v: k.total_ns })), fmtNs, "kernels-chart"),
      table([
        { key: "name", label: "name", cls: "name" }, { key: "kind", label: "kind" }, { key: "device", label: "device", num: true },
        { key: "calls", label: "calls", num: true, fmt: fmtInt }, { key: "total_ns", label: "total", num: true, fmt: fmtNs },
        { key: "pct", label: "share", num: true, fmt: fmtPct }, { key: "avg_ns", label: "avg", num: true, fmt: fmtNs },
        { key: "max_ns", label: "max", num: true, fmt: fmtNs }, { key: "occupancy_pct", label: "est. occupancy", num: true, fmt: fmtPct },
        { key: "op", label: "launched by", cls: "name" },
      ], ks, { id: "kernels-table", sort: "total_ns" }),
      ...reportPart("Kernel types", "kernel_types"), ...reportPart("Time on the device", "temporal_breakdown"),
      ...reportPart("Launches", "launch_stats")];
  }

  function viewMemory() {
    const m = run().memory || { devices: [], ops: [] };
    if (!m.devices.length) return [h("h2", {}, "Memory"), empty("No memory events (record with profile_memory=True / torchscope run --memory).")];
    const out = [h("h2", {}, "Memory"), h("div", { class: "cards" }, m.devices.map((d) => card(`${d.label} peak allocated`, fmtBytes(d.peak_allocated))))];
    m.devices.forEach((d) => {
      out.push(h("h3", {}, `${d.label}: allocated and reserved over time`));
      out.push(lineChart([{ name: "allocated", ts: d.allocated.ts, v: d.allocated.bytes }, { name: "reserved", ts: d.reserved.ts, v: d.reserved.bytes }], { id: "memory-chart", fmtY: fmtBytes }));
    });
    out.push(h("h3", {}, "Allocations by op"));
    out.push(table([
      { key: "name", label: "op", cls: "name" }, { key: "device", label: "device" },
      { key: "allocations", label: "allocations", num: true, fmt: fmtInt }, { key: "allocated_bytes", label: "allocated", num: true, fmt: fmtBytes },
      { key: "freed_bytes", label: "freed", num: true, fmt: fmtBytes }, { key: "largest_bytes", label: "largest", num: true, fmt: fmtBytes },
    ], m.ops, { id: "memory-table", sort: "allocated_bytes" }));
    out.push(...reportPart("Possible leaks (allocated, never freed)", "memory", "leaks"));
    return out;
  }

  function viewModules() {
    const t = run().modules;
    if (!t || !(t.children || []).length) return [h("h2", {}, "Modules"), empty("No nn.Module scopes in this trace (record with with_stack=True or with_modules=True).")];
    const total = t.total_ns || 1;
    function node(n, depth) {
      const row = h("span", { class: "row" }, h("span", { class: "bar", style: `width:${Math.max(1, (160 * n.total_ns) / total)}px` }),
        h("span", {}, n.name), h("span", { class: "muted" }, `${fmtNs(n.total_ns)} · ${fmtInt(n.calls)} calls`));
      if (!(n.children || []).length) return h("li", {}, row);
      return h("li", {}, h("details", depth < 2 ? { open: true } : {}, h("summary", {}, row), h("ul", {}, n.children.map((c) => node(c, depth + 1)))));
    }
    return [h("h2", {}, "Modules"), h("div", { class: "tree", "data-testid": "module-tree" }, h("ul", {}, t.children.map((c) => node(c, 0))))];
  }

  function viewDistributed() {
    const d = state.payload.distributed;
    const out = [h("h2", {}, "Distributed")];
    if (!d) {
      const co = (run().overview || {}).comm_overlap || [];
      if (!co.length) return [...out, empty("One trace, no per-rank data.")];
      out.push(h("h3", {}, "Computation and communication per step"));
      out.push(stackedBars(co, ["computation_ns", "communication_ns", "overlap_ns", "other_ns"], "step", { id: "dist-chart", fmt: fmtNs }));
      return out;
    }
    out.push(stackedBars(d.map((x) => ({ ...x, run: x.rank ?? x.run })), ["computation_ns", "communication_ns"], "run", { id: "dist-chart", fmt: fmtNs }));
    out.push(table([
      { key: "run", label: "run", cls: "name" }, { key: "rank", label: "rank", num: true }, { key: "steps", label: "steps", num: true },
      { key: "step_ns", label: "avg step", num: true, fmt: fmtNs }, { key: "computation_ns", label: "computation", num: true, fmt: fmtNs },
      { key: "communication_ns", label: "communication", num: true, fmt: fmtNs }, { key: "overlap_ns", label: "overlap", num: true, fmt: fmtNs },
      { key: "vs_fastest_pct", label: "vs fastest", num: true, fmt: fmtPct }, { key: "straggler", label: "straggler", fmt: (v) => (v ? "yes" : "") },
    ], d, { id: "dist-table", sort: "step_ns" }));
    const rd = (report() || {}).distributed;
    if (rd) {
      if (rd.slowest_rank !== undefined && rd.slowest_rank !== null) out.push(h("div", { class: "rec" }, h("div", { class: "t" }, `Slowest rank: ${rd.slowest_rank}`)));
      if ((rd.collectives || []).length) out.push(h("h3", {}, "Collectives"), generic(rd.collectives));
      if ((rd.wait_for_slowest || []).length) out.push(h("h3", {}, "Time waiting for the slowest rank"), generic(rd.wait_for_slowest));
    }
    return out;
  }

  function viewDiff() {
    const d = state.payload.diff;
    if (!d) return [h("h2", {}, "Diff"), empty("Compare two traces with: torchscope diff A B --html diff.html")];
    const sign = (v) => h("span", { class: v > 0 ? "pos" : v < 0 ? "neg" : "" }, (v > 0 ? "+" : "") + fmtNs(v));
    const out = [h("h2", {}, `Diff: ${d.a} → ${d.b}`),
      h("div", { class: "cards" }, card("span A", fmtNs((d.summary_a || {}).span_ns)), card("span B", fmtNs((d.summary_b || {}).span_ns))),
      table([
        { key: "name", label: "op", cls: "name" }, { key: "calls_a", label: "calls A", num: true, fmt: fmtInt }, { key: "calls_b", label: "calls B", num: true, fmt: fmtInt },
        { key: "self_ns_a", label: "self A", num: true, fmt: fmtNs }, { key: "self_ns_b", label: "self B", num: true, fmt: fmtNs },
        { key: "delta_ns", label: "change", num: true, fmt: sign }, { key: "delta_pct", label: "change %", num: true, fmt: fmtPct },
      ], d.ops || [], { id: "diff-table" })];
    if (d.report) out.push(h("h3", {}, "Analysis diff"), generic(d.report));
    return out;
  }

  function viewAccuracy() {
    const a = accuracy();
    if (!a) return [h("h2", {}, "Accuracy"), empty("No accuracy comparison in this report.")];
    const out = [h("h2", {}, "Accuracy")];
    const sm = a.summary || {};
    if (Object.keys(sm).length) out.push(h("div", { class: "cards" }, ["target", "reference", "ops", "compared", "diverged"]
      .filter((k) => sm[k] !== undefined).map((k) => card(k, typeof sm[k] === "number" ? fmtInt(sm[k]) : String(sm[k])))));
    const fd = a.first_divergence;
    out.push(h("div", { class: fd ? "rec" : "card", "data-testid": "first-divergence" },
      h("div", { class: "t" }, fd ? "First divergence" : "No divergence beyond tolerance"), fd ? generic(fd) : null));
    if ((a.module_calls || []).length) {
      const fm = a.first_module_divergence;
      out.push(h("div", { class: fm ? "rec" : "card", "data-testid": "first-module-divergence" },
        h("div", { class: "t" }, fm ? "First divergent module" : "No module call diverged beyond tolerance"), fm ? generic(fm) : null));
    }
    if ((a.ops || []).length) { out.push(h("h3", {}, "Per op")); out.push(generic(a.ops)); }
    if ((a.module_calls || []).length) { out.push(h("h3", {}, "Per module call")); out.push(generic(a.module_calls)); }
    if ((a.modules || []).length) { out.push(h("h3", {}, "Per module")); out.push(generic(a.modules)); }
    return out;
  }
  const accuracy = () => state.payload.accuracy || (report() || {}).accuracy || null;

  function viewReport() {
    return [h("h2", {}, "Full analysis report"), report() ? generic(report()) : empty("The analysis report is not available for this trace.")];
  }

  // -- timeline: our own canvas renderer; merges sub-pixel events per row (decimation) ----
  function viewTimeline() {
    const t = run().timeline;
    if (!t || !t.events) return [h("h2", {}, "Timeline"), empty("No events with a duration.")];
    if (!t._dec) {
      t._dec = { start: decode(t.start, Float64Array), dur: decode(t.dur, Float32Array), track: decode(t.track, Uint16Array),
        depth: decode(t.depth, Uint8Array), name: decode(t.name, Uint32Array), kind: decode(t.kind, Uint8Array) };
    }
    const E = t._dec, n = t.events, RH = 14, TOP = 18; // TOP: the time ruler
    const rowBase = []; let rows = 0;
    t.tracks.forEach((tr, i) => { rowBase[i] = rows; rows += Math.min(tr.depth || 1, 24); });
    let end = 0; for (let i = 0; i < n; i++) end = Math.max(end, E.start[i] + E.dur[i]);
    const view = { x0: 0, x1: Math.max(end, 1) };
    const LABEL = 190, wrap = h("div", { id: "tl-wrap" });
    const canvas = h("canvas", { "data-testid": "timeline-canvas" });
    const info = h("span", { class: "muted", "data-testid": "timeline-range" });
    const sel = h("div", { class: "sel", "data-testid": "timeline-selection" }, "Click an event for details.");
    wrap.appendChild(canvas);
    function draw() {
      const W = Math.max(600, wrap.clientWidth || 1200), H = TOP + rows * RH + 4, dpr = window.devicePixelRatio || 1;
      canvas.width = W * dpr; canvas.height = H * dpr; canvas.style.width = W + "px"; canvas.style.height = H + "px";
      const g = canvas.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0); g.clearRect(0, 0, W, H);
      const span = view.x1 - view.x0, scale = (W - LABEL) / span;
      const pend = new Float64Array(rows * 3).fill(-1); // per row: pending x0, x1, kind
      function flush(r) {
        if (pend[r * 3] < 0) return;
        g.fillStyle = COLORS[pend[r * 3 + 2] % COLORS.length];
        g.fillRect(LABEL + pend[r * 3], TOP + r * RH + 1, Math.max(1, pend[r * 3 + 1] - pend[r * 3]), RH - 2);
        pend[r * 3] = -1;
      }
      let drawn = 0;
      for (let i = 0; i < n; i++) {
        const st = E.start[i], en = st + E.dur[i];
        if (en < view.x0 || st > view.x1) continue;
        const tr = E.track[i], maxd = Math.min(t.tracks[tr].depth || 1, 24);
        const r = rowBase[tr] + Math.min(E.depth[i], maxd - 1);
        const a = Math.max(0, (st - view.x0) * scale), b = Math.min(W - LABEL, (en - view.x0) * scale);
        if (pend[r * 3] >= 0 && a <= pend[r * 3 + 1] + 0.5 && b - a < 2) { pend[r * 3 + 1] = Math.max(pend[r * 3 + 1], b); continue; }
        flush(r);
        pend[r * 3] = a; pend[r * 3 + 1] = b; pend[r * 3 + 2] = E.kind[i]; drawn++;
        if (b - a > 40) { flush(r); g.fillStyle = "#fff"; g.font = "10px sans-serif"; g.save(); g.beginPath(); g.rect(LABEL + a, TOP + r * RH, b - a, RH); g.clip(); g.fillText(t.names[E.name[i]], LABEL + a + 2, TOP + r * RH + 10); g.restore(); }
      }
      for (let r = 0; r < rows; r++) flush(r);
      g.fillStyle = "#fff"; g.fillRect(0, 0, LABEL, H); g.fillStyle = "#1d2330"; g.font = "11px sans-serif";
      t.tracks.forEach((tr, i) => { g.fillText(tr.label.slice(0, 30), 4, TOP + rowBase[i] * RH + 11); g.fillStyle = "#e2e5eb"; g.fillRect(0, TOP + rowBase[i] * RH, W, 1); g.fillStyle = "#1d2330"; });
      g.fillStyle = "#fff"; g.fillRect(0, 0, W, TOP); g.fillStyle = "#6b7385"; g.font = "10px sans-serif";
      for (let k = 0; k < 8; k++) { const x = LABEL + (k * (W - LABEL)) / 8; g.fillRect(x, TOP - 5, 1, 5); g.fillText(fmtNs(view.x0 + (k * span) / 8), x + 2, 11); }
      g.fillRect(0, TOP - 1, W, 1);
      info.textContent = ` ${fmtNs(view.x0)} – ${fmtNs(view.x1)} (${fmtNs(span)} shown, ${fmtInt(drawn)} rectangles for ${fmtInt(n)} events` + (t.total > n ? `; the ${fmtInt(n)} longest of ${fmtInt(t.total)} kept` : "") + ")";
      canvas.dataset.x0 = view.x0; canvas.dataset.x1 = view.x1;
    }
    function zoom(f, at) {
      const W = canvas.clientWidth || 1200, frac = at === undefined ? 0.5 : Math.min(1, Math.max(0, (at - LABEL) / (W - LABEL)));
      const span = view.x1 - view.x0, c = view.x0 + frac * span, ns = Math.max(1000, Math.min(end * 1.05 + 1, span * f));
      view.x0 = Math.max(0, c - frac * ns); view.x1 = view.x0 + ns; draw();
    }
    function hit(ev) {
      const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      if (x < LABEL) return -1;
      const W = canvas.clientWidth, tns = view.x0 + ((x - LABEL) / (W - LABEL)) * (view.x1 - view.x0), r = Math.floor((y - TOP) / RH);
      const slack = (3 * (view.x1 - view.x0)) / (W - LABEL);
      let best = -1;
      for (let i = 0; i < n; i++) {
        const tr = E.track[i], maxd = Math.min(t.tracks[tr].depth || 1, 24);
        if (rowBase[tr] + Math.min(E.depth[i], maxd - 1) !== r) continue;
        if (E.start[i] - slack <= tns && tns <= E.start[i] + E.dur[i] + slack && (best < 0 || E.dur[i] < E.dur[best])) best = i;
      }
      return best;
    }
    const tip = $("#tip");
    canvas.addEventListener("wheel", (e) => { e.preventDefault(); zoom(e.deltaY > 0 ? 1.25 : 0.8, e.offsetX); }, { passive: false });
    let drag = null;
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, x0: view.x0, x1: view.x1, moved: false }; });
    window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
    canvas.addEventListener("mousemove", (e) => {
      if (drag && e.buttons) {
        const dx = ((e.clientX - drag.x) / (canvas.clientWidth - LABEL)) * (drag.x1 - drag.x0);
        if (Math.abs(e.clientX - drag.x) > 2) drag.moved = true;
        view.x0 = Math.max(0, drag.x0 - dx); view.x1 = view.x0 + (drag.x1 - drag.x0); draw(); return;
      }
      const i = hit(e);
      if (i < 0) { tip.hidden = true; return; }
      tip.textContent = `${t.names[E.name[i]]} · ${t.kinds[E.kind[i]]} · ${fmtNs(E.dur[i])}`;
      tip.style.left = e.clientX + 12 + "px"; tip.style.top = e.clientY + 12 + "px"; tip.hidden = false;
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (e) => {
      if (drag && drag.moved) return;
      const i = hit(e);
      if (i < 0) return;
      const tr = t.tracks[E.track[i]];
      sel.replaceChildren(h("div", {}, t.names[E.name[i]]), h("div", { class: "muted" },
        `${t.kinds[E.kind[i]]} · ${tr.label} · start ${fmtNs(E.start[i])} · duration ${fmtNs(E.dur[i])}`));
    });
    const tools = h("div", { class: "tl-tools" },
      h("button", { "data-testid": "zoom-in", onclick: () => zoom(0.5) }, "zoom in"),
      h("button", { "data-testid": "zoom-out", onclick: () => zoom(2) }, "zoom out"),
      h("button", { "data-testid": "zoom-reset", onclick: () => { view.x0 = 0; view.x1 = Math.max(end, 1); draw(); } }, "reset"),
      h("button", { "data-testid": "export-chrome", onclick: () => exportChrome(t, E) }, "export Chrome trace (Perfetto)"),
      info);
    setTimeout(draw, 0);
    window.addEventListener("resize", () => { if (state.view === "timeline") draw(); });
    return [h("h2", {}, "Timeline"), h("div", { class: "muted" }, "Wheel to zoom at the pointer, drag to pan, click for details."), tools, wrap, sel];
  }
  function exportChrome(t, E) {
    const r = run();
    if (r.download) { const a = h("a", { href: r.download, download: "" }); document.body.appendChild(a); a.click(); a.remove(); return; }
    const evs = [];
    for (let i = 0; i < t.events; i++) {
      const tr = t.tracks[E.track[i]];
      evs.push({ ph: "X", cat: t.kinds[E.kind[i]], name: t.names[E.name[i]], pid: tr.device >= 0 ? `device ${tr.device}` : tr.pid, tid: tr.tid,
        ts: (t.t0_ns + E.start[i]) / 1000, dur: E.dur[i] / 1000 });
    }
    const blob = new Blob([JSON.stringify({ traceEvents: evs, displayTimeUnit: "ms" })], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: (r.name || "trace") + ".chrome.json" });
    document.body.appendChild(a); a.click(); a.remove();
  }

  // -- job view (torchscope.job): one summary for many runs, ranks and cycles ------------------
  // Self-contained: reads only payload.job (job.render.job_section); per-rank full views are
  // sibling HTML files named in job.runs[i].per_rank[j].views.
  function viewJob() {
    const J = state.payload.job || { runs: [] };
    const out = [h("h2", {}, "Job")];
    J.runs.forEach((R) => {
      const st = R.step_ns || {};
      out.push(h("h3", { "data-testid": "job-run" }, `${R.run}: ${R.ranks} rank(s), ${R.cycles} cycle(s)` + (R.backend ? `, ${R.backend}` : "")));
      out.push(h("div", { class: "cards" }, [card("min step", fmtNs(st.min) + (st.min_rank !== null ? ` (rank ${st.min_rank})` : "")),
        card("median step", fmtNs(st.median)), card("max step", fmtNs(st.max) + (st.max_rank !== null ? ` (rank ${st.max_rank})` : "")),
        card("straggler", R.straggler ? `rank ${R.straggler.rank}` : "none"),
        card("wait per step", R.straggler ? fmtNs(R.straggler.wait_per_step_ns) : "–")]));
      if (R.straggler) {
        out.push(h("h4", {}, `Rank ${R.straggler.rank} arrives last at ${R.straggler.last} of ${R.straggler.matched} collectives; it spends more on`));
        out.push(table([{ key: "name", label: "op / kernel / category", cls: "name" }, { key: "rank_ns", label: "on the straggler", num: true, fmt: fmtNs },
          { key: "median_ns", label: "other ranks' median", num: true, fmt: fmtNs }, { key: "excess_ns", label: "excess per step", num: true, fmt: fmtNs }],
          [...R.straggler.ops, ...R.straggler.kernels, ...R.straggler.categories], { id: "job-straggler", sort: "excess_ns" }));
      }
      if ((R.collectives || []).length) {
        out.push(h("h4", {}, "Collectives (aligned across ranks)"));
        out.push(table([{ key: "group", label: "group", cls: "name" }, { key: "name", label: "collective", cls: "name" }, { key: "count", label: "count", num: true },
          { key: "median_duration_ns", label: "median duration", num: true, fmt: fmtNs }, { key: "mean_skew_ns", label: "mean arrival skew", num: true, fmt: fmtNs },
          { key: "max_skew_ns", label: "max skew", num: true, fmt: fmtNs }, { key: "mean_wait_ns", label: "mean wait", num: true, fmt: fmtNs }], R.collectives, { id: "job-collectives" }));
      }
      const waits = Object.fromEntries((R.rank_waits || []).map((w) => [w.rank, w]));
      out.push(h("h4", {}, "Ranks"));
      out.push(table([{ key: "rank", label: "rank", num: true }, { key: "steps", label: "steps", num: true }, { key: "step_ns", label: "median step", num: true, fmt: fmtNs },
        { key: "last", label: "arrived last", num: true }, { key: "wait_ns", label: "waited", num: true, fmt: fmtNs },
        { key: "findings", label: "findings", cls: "name" }, { key: "view", label: "full view", cls: "name" }],
        (R.per_rank || []).map((p) => ({ ...p, last: (waits[p.rank] || {}).last, wait_ns: (waits[p.rank] || {}).wait_ns, findings: (p.findings || []).join(", "),
          view: (p.views || []).length ? h("span", {}, p.views.map((v) => h("a", { href: v }, v + " "))) : "" })), { id: "job-ranks", sort: "rank" }));
      if ((R.cycle_table || []).length > 1) {
        out.push(h("h4", {}, "Cycles"));
        out.push(table([{ key: "cycle", label: "cycle", num: true }, { key: "ranks", label: "ranks", num: true }, { key: "steps", label: "steps", num: true },
          { key: "median_step_ns", label: "median step", num: true, fmt: fmtNs }, { key: "max_step_ns", label: "max step", num: true, fmt: fmtNs },
          { key: "slowest_rank", label: "slowest rank", num: true }], R.cycle_table, { id: "job-cycles" }));
      }
      out.push(h("h4", {}, "Recommendations"));
      out.push((R.recommendations || []).length ? h("div", { "data-testid": "job-recommendations" }, R.recommendations.map((f) =>
        recCard({ rule: `${f.rule} (on ${f.on_ranks} of ${f.of_ranks} ranks; worst: rank ${f.worst_rank})`, message: f.message, fix: f.fix, evidence: f.evidence })))
        : h("div", { class: "muted" }, "No recommendations."));
    });
    return out;
  }

  // -- shell -----------------------------------------------------------------------------
  const VIEWS = [
    ["job", "Job", viewJob, () => !!state.payload.job],
    ["overview", "Overview", viewOverview, () => true],
    ["operators", "Operators", viewOperators, () => true],
    ["kernels", "Kernels", viewKernels, () => true],
    ["memory", "Memory", viewMemory, () => true],
    ["modules", "Modules", viewModules, () => true],
    ["distributed", "Distributed", viewDistributed, () => true],
    ["diff", "Diff", viewDiff, () => !!state.payload.diff],
    ["timeline", "Timeline", viewTimeline, () => true],
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
    const v = tabs.find((x) => x[0] === state.view);
    const t0 = performance.now();
    $("#view").replaceChildren(...v[2]());
    $("#view").dataset.rendered = state.view;
    if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = String(Math.round(performance.now()));
    $("#view").dataset.renderMs = String(Math.round(performance.now() - t0));
  }
  function runSelect(names) {
    const sel = $("#run-select");
    sel.replaceChildren(...names.map((n, i) => h("option", { value: i, selected: i === state.run ? true : null }, n)));
    sel.parentElement.hidden = names.length < 2;
  }
  function showPayload(P) {
    state.payload = P;
    if (P.job && location.hash.length <= 1) state.view = "job";  // a job opens on its summary
    if (state.run >= (P.runs || []).length) state.run = 0;
    if (DATA.transport !== "serve") runSelect((P.runs || []).map((r) => r.name));
    render();
  }

  // serve transport: list the log directory's traces, load one, poll for new ones
  async function serveMain() {
    const sel = $("#run-select");
    let current = null;
    async function poll() {
      const res = await fetch("api/runs", { cache: "no-store" });
      const list = await res.json();
      const before = state.runs.length;
      state.runs = list.runs;
      const keep = current;
      sel.replaceChildren(...list.runs.map((r) => h("option", { value: r.id, selected: r.id === keep ? true : null }, r.name)));
      sel.parentElement.hidden = false;
      $("#live").textContent = `${list.runs.length} traces in ${list.logdir}` + (before && list.runs.length > before ? " · new traces arrived" : "");
      if (current === null && list.runs.length) await load(list.runs[0].id);
      if (!list.runs.length) $("#view").replaceChildren(empty("No traces yet; this page refreshes as they arrive."));
    }
    async function load(id) {
      current = id;
      $("#view").replaceChildren(empty("Loading…"));
      const res = await fetch("api/payload?id=" + encodeURIComponent(id), { cache: "no-store" });
      if (!res.ok) { $("#view").replaceChildren(empty(`Could not load: ${await res.text()}`)); return; }
      const P = await res.json();
      (P.runs || []).forEach((r) => { r.download = "api/file?id=" + encodeURIComponent(id); });
      state.run = 0;
      showPayload(P);
    }
    sel.addEventListener("change", () => load(sel.value));
    await poll();
    setInterval(() => poll().catch(() => { $("#live").textContent = "server not reachable"; }), DATA.poll_ms || 5000);
  }

  $("#run-select").addEventListener("change", (e) => { if (DATA.transport !== "serve") { state.run = Number(e.target.value); render(); } });
  if (location.hash.length > 1) state.view = location.hash.slice(1);
  if (DATA.transport === "serve") serveMain();
  else showPayload(DATA);
})();
