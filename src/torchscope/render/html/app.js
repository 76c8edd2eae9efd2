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
  // Numbers as text by the unit the report declares (report.units): the twins of
  // render/units.py, so the page and the terminal print the same text. Rounding is half-up on
  // integers, never toFixed's binary ties.
  const DASH = "–";
  const none = (v) => v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
  const group = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const halfUp = (num, den) => Math.floor((2 * num + den) / (2 * den));
  function fixed(q, d) {
    if (!d) return group(q);
    const p = 10 ** d, whole = Math.floor(q / p), frac = q - whole * p;
    return group(whole) + "." + String(frac).padStart(d, "0");
  }
  function fmtUs(us) {
    if (none(us)) return DASH;
    const ns = Math.round(us * 1000), sign = ns < 0 ? "-" : "", a = Math.abs(ns);
    if (a >= 1e9) return sign + fixed(halfUp(a, 1e6), 3) + " s";
    if (a >= 1e6) return sign + fixed(halfUp(a, 1000), 3) + " ms";
    if (a >= 1000) return sign + fixed(halfUp(a, 100), 1) + " µs";
    return sign + a + " ns";
  }
  const fmtNs = (ns) => (none(ns) ? DASH : fmtUs(ns / 1000));
  const fmtOffset = (ts, start) => (none(ts) ? DASH : "+" + fmtUs(ts - (start || 0)));
  function fmtBytes(n) {
    if (none(n)) return DASH;
    const u = ["B", "KiB", "MiB", "GiB", "TiB"], a = Math.abs(Math.trunc(n)), sign = n < 0 ? "-" : "";
    let i = 0;
    while (a >= 1024 ** (i + 1) && i < u.length - 1) i++;
    return i === 0 ? `${sign}${a} B` : `${sign}${fixed(halfUp(a * 100, 1024 ** i), 2)} ${u[i]}`;
  }
  function decimals(v, d) {
    const q = Math.floor(Math.abs(v) * 10 ** d + 0.5);
    return (v < 0 && q ? "-" : "") + fixed(q, d);
  }
  const fmtPct = (p) => (none(p) ? DASH : decimals(p, 1) + " %");
  const fmtCount = (v) => (none(v) ? DASH : Number.isInteger(v) ? group(v) : decimals(v, 2));
  const fmtInt = fmtCount;
  function fmtSi(v, unit) {
    if (none(v)) return DASH;
    const p = ["", "K", "M", "G", "T", "P", "E"];
    let i = 0, a = Math.abs(v);
    while (a >= 1000 && i < p.length - 1) { a /= 1000; i++; }
    return `${decimals(v >= 0 ? a : -a, 2)} ${p[i]}${unit}`;
  }
  // a value in the unit the report names; start: the trace's first event (timestamps)
  function fmt(v, unit, start) {
    if (none(v)) return DASH;
    if (typeof v !== "number") return String(v);
    switch (unit) {
      case "us": return fmtUs(v);
      case "timestamp_us": return fmtOffset(v, start);
      case "bytes": return fmtBytes(v);
      case "percent": return fmtPct(v);
      case "fraction": return fmtPct(100 * v);
      case "id": return String(v);
      case "flop": return fmtSi(v, "FLOP");
      case "flop/s": return fmtSi(v, "FLOP/s");
      case "count": return fmtCount(v);
      case "blocks/SM": return decimals(v, 2);
      // a number the report gives no unit (an accuracy metric): up to 4 significant digits
      default: return Number.isInteger(v) ? group(v) : String(Number(v.toPrecision(4)));
    }
  }
  // a report key as a column or section label: words, without the unit suffix its value shows
  const pretty = (k) => String(k).replace(/_(us|pct|bytes)$/, "").replace(/_/g, " ");
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
      const body = r.slice(0, opts.limit || 1000).map((x) => h("tr", opts.onRow ? { class: "clickable", onclick: () => opts.onRow(x) } : {}, cols.map((c) => {
        const v = x[c.key];
        return h("td", { class: c.num ? "num" : (c.cls || null) }, c.fmt ? c.fmt(v, x) : (v ?? "–"));
      })));
      box.replaceChildren(h("table", { class: "grid", "data-testid": opts.id || "table" }, h("thead", {}, head), h("tbody", {}, body)));
      count.textContent = ` ${r.length} of ${rows.length} rows`;
    }
    draw();
    return h("div", {}, input, count, box);
  }

  // Anything in the report: objects as key/value lists, lists of objects as tables, numbers in
  // the unit report.units names for their key (a nested map inherits its key's unit).
  function generic(v, key, depth) {
    depth = depth || 0;
    const units = UNITS(), start = START();
    if (v === null || v === undefined) return h("span", { class: "muted" }, DASH);
    if (Array.isArray(v)) {
      if (!v.length) return h("span", { class: "muted" }, "none");
      if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
        const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
        const simple = keys.filter((k) => v.every((x) => x[k] === null || x[k] === undefined || typeof x[k] !== "object"));
        const cols = simple.map((k) => ({ key: k, label: pretty(k), num: v.some((x) => typeof x[k] === "number"), fmt: (x) => fmt(x, units[k], start), cls: typeof v[0][k] === "string" ? "name" : null }));
        if (cols.length) return table(cols, v, { id: "generic-table" });
      }
      return h("div", {}, v.map((x) => h("div", {}, typeof x === "object" ? generic(x, key, depth + 1) : String(x))));
    }
    if (typeof v === "object") {
      return h("dl", { class: "kv" }, Object.entries(v).flatMap(([k, x]) => [h("dt", {}, pretty(k)),
        h("dd", {}, generic(x, units[k] ? k : key, depth + 1))]));
    }
    if (typeof v === "number") return document.createTextNode(fmt(v, units[key], start));
    if (typeof v === "boolean") return document.createTextNode(v ? "yes" : "no");
    return document.createTextNode(String(v));
  }

  // -- charts ----------------------------------------------------------------------------
  function legend(names) {
    return h("div", { class: "legend" }, names.map((n, i) => h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), n)));
  }
  function stackedBars(rows, cats, xKey, opts) {
    const W = 900, H = 240, L = 86, B = 24, n = rows.length;
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-testid": opts.id });
    const tk = TorchscopeCharts.ticks(Math.max(0, ...rows.map((r) => cats.reduce((a, c) => a + (r[c] || 0), 0))), 4, opts.binary);
    const max = tk[tk.length - 1];
    const bw = Math.max(1, (W - L - 10) / Math.max(n, 1));
    for (const v of tk) {
      const y = H - B - (v / max) * (H - B - 10);
      svg.appendChild(s("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#eee" }));
      svg.appendChild(s("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, TorchscopeCharts.trim(opts.fmt(v))));
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
  function hbars(items, fmtv, id) {
    const W = 900, row = 20, L = 330, max = Math.max(1e-9, ...items.map((x) => x.v || 0));
    const svg = s("svg", { width: W, height: items.length * row + 6, "data-testid": id });
    items.forEach((x, i) => {
      const label = x.k.length > 52 ? x.k.slice(0, 50) + "…" : x.k;
      svg.appendChild(s("text", { x: L - 6, y: i * row + 14, "text-anchor": "end" }, label));
      const w = ((W - L - 90) * (x.v || 0)) / max;
      const r = s("rect", { x: L, y: i * row + 4, width: Math.max(1, w), height: row - 6, fill: COLORS[0] });
      r.appendChild(s("title", {}, x.k));
      svg.appendChild(r);
      svg.appendChild(s("text", { x: L + w + 6, y: i * row + 14 }, fmtv(x.v)));
    });
    return svg;
  }
  // series on a time axis (µs since the trace's start) with round ticks on both axes, a legend,
  // and marks (the report's peaks): [{ts, v, label}]
  function lineChart(series, opts) {
    const W = 900, H = 260, L = 80, B = 28, T = 14;
    const svg = s("svg", { width: W, height: H, "data-testid": opts.id });
    const xs = series.flatMap((x) => x.ts), ys = series.flatMap((x) => x.v);
    if (!xs.length) return empty("no samples");
    const x0 = Math.min(...xs), xt = TorchscopeCharts.ticks(Math.max(...xs), 6), x1 = xt[xt.length - 1];
    const yt = TorchscopeCharts.ticks(Math.max(1, ...ys), 4, opts.binary), ymax = yt[yt.length - 1];
    const X = (t) => L + ((t - Math.min(0, x0)) / Math.max(1e-9, x1 - Math.min(0, x0))) * (W - L - 10);
    const Y = (v) => H - B - (v / ymax) * (H - B - T);
    for (const v of yt) {
      svg.appendChild(s("line", { x1: L, x2: W, y1: Y(v), y2: Y(v), stroke: "#eee" }));
      svg.appendChild(s("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, TorchscopeCharts.trim(opts.fmtY(v))));
    }
    xt.forEach((v, i) => {
      svg.appendChild(s("line", { x1: X(v), x2: X(v), y1: H - B, y2: H - B + 4, stroke: "#999" }));
      svg.appendChild(s("text", { x: X(v), y: H - B + 15, "text-anchor": i === xt.length - 1 ? "end" : "middle" }, TorchscopeCharts.trim(fmtUs(v))));
    });
    svg.appendChild(s("text", { x: W - 10, y: H - 1, "text-anchor": "end" }, "time since the trace's start"));
    series.forEach((ser, j) => {
      let d = "";
      for (let i = 0; i < ser.ts.length; i++) {
        const x = X(ser.ts[i]).toFixed(1), y = Y(ser.v[i]).toFixed(1);
        d += (i ? (" H" + x + " V" + y) : ("M" + x + " " + y));
      }
      svg.appendChild(s("path", { d, fill: "none", stroke: COLORS[j % COLORS.length], "stroke-width": 1.5 }));
    });
    (opts.marks || []).forEach((m) => {
      const g = s("g", { "data-testid": "peak-marker" });
      g.appendChild(s("circle", { cx: X(m.ts), cy: Y(m.v), r: 4, fill: "#e03131" }));
      g.appendChild(s("text", { x: X(m.ts) + 6, y: Math.max(T, Y(m.v) - 4), style: "fill:#e03131" }, m.label));
      svg.appendChild(g);
    });
    return h("div", {}, legend(series.map((x) => x.name)), svg);
  }

  // -- views -----------------------------------------------------------------------------
  // Every number below is the report's (report --json), in its order, formatted by its unit.
  const run = () => (state.payload.runs || [])[state.run] || {};
  const report = () => state.payload.report || null;
  // the report of the current run: the trace's, or this rank's in a set
  function rep() {
    const r = report();
    if (r && r.kind === "traceset") return (r.ranks || {})[run().name] || {};
    return r || {};
  }
  const UNITS = () => (report() || {}).units || {};
  const START = () => (rep().meta || {}).start_us || 0;
  // a column of a report table: its label, and its unit from report.units
  const col = (key, label, extra) => Object.assign({ key, label, num: true, fmt: (v) => fmt(v, UNITS()[key], START()) }, extra || {});
  const nameCol = (key, label) => ({ key, label, cls: "name" });

  function recCard(rec) {
    return h("div", { class: "rec", "data-testid": "recommendation" },
      h("div", { class: "t" }, rec.rule + (rec.rank !== undefined && rec.rank !== null ? ` (rank ${rec.rank})` : "")), h("div", {}, rec.message),
      rec.fix ? h("div", {}, h("b", {}, "Fix: "), String(rec.fix)) : null,
      Object.keys(rec.evidence || {}).length ? h("details", {}, h("summary", {}, "evidence"), generic(rec.evidence, "evidence", 1)) : null);
  }
  function warningsBox() {
    const input = (rep().meta || {}).warnings || [], other = state.payload.warnings || [];
    const out = [];
    if (input.length) out.push(h("div", { class: "rec warnbox", "data-testid": "input-warnings" }, h("div", { class: "t" }, "The input needed repair"), h("ul", {}, input.map((w) => h("li", {}, w)))));
    if (other.length) out.push(h("details", { "data-testid": "warnings" }, h("summary", { class: "warn" }, `${other.length} warnings`), h("ul", {}, other.map((w) => h("li", {}, w)))));
    return out;
  }
  const DEVICE_CATS = ["Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other"];
  const HOST_CATS = ["Operators", "Communication", "DataLoader", "Optimizer", "Python outside ops", "Other"];

  function viewOverview() {
    const r = rep(), m = r.meta || {}, P = state.payload, steps = r.steps || [];
    const out = [h("h2", {}, "Overview"), ...warningsBox()];
    const cards = [card("time span", fmtUs(m.span_us)), card("events", fmtCount(m.events)), card("steps", fmtCount(steps.length))];
    if (r.breakdown_us && r.breakdown_us.Total) cards.push(card("avg step", fmtUs(r.breakdown_us.Total)));
    (r.devices || []).forEach((d) => {
      cards.push(card(`device ${d.device} utilization`, fmt(d.utilization, "fraction")));
      if (!none(d.sm_efficiency)) cards.push(card(`device ${d.device} est. SM efficiency`, fmt(d.sm_efficiency, "fraction")));
      if (!none(d.achieved_occupancy)) cards.push(card(`device ${d.device} est. occupancy`, fmt(d.achieved_occupancy, "fraction")));
    });
    if (!none(m.rank)) cards.push(card("rank", `${m.rank} of ${m.world_size ?? "?"}`));
    if (P.run) cards.push(card("exit code", String(P.run.exit_code)));
    if (P.run && !none(P.run.setup_s)) cards.push(card("setup (before step 0)", fmtUs(P.run.setup_s * 1e6)));
    out.push(h("div", { class: "cards", "data-testid": "overview-cards" }, cards));
    const hasDevice = steps.some((x) => (x.breakdown_us.Kernel || 0) + (x.breakdown_us.Memcpy || 0) + (x.breakdown_us.Memset || 0) > 0);
    const cats = hasDevice ? DEVICE_CATS : HOST_CATS;
    const part = hasDevice ? "breakdown_us" : "host_breakdown_us";
    if (steps.length) {
      out.push(h("h3", {}, hasDevice ? "Step time breakdown" : "Step time breakdown (host)"));
      out.push(stackedBars(steps.map((x) => ({ step: x.step, ...x[part] })), cats, "step", { id: "step-chart", fmt: fmtUs }));
      const avg = r[part] || {};
      out.push(table([nameCol("cat", "category"), { key: "us", label: "avg per step", num: true, fmt: fmtUs }, { key: "pct", label: "share", num: true, fmt: fmtPct }],
        cats.map((c) => ({ cat: c, us: avg[c] || 0, pct: avg.Total ? (100 * (avg[c] || 0)) / avg.Total : null })), { id: "breakdown-table" }));
      if (m.steps_from_trace) {
        out.push(h("h3", {}, "Steps (start: time since the trace's first event)"));
        out.push(table([col("step", "step"), col("start_us", "start"), col("dur_us", "duration")], steps, { id: "steps-table" }));
      }
    } else out.push(empty("No step information in this trace."));
    const recs = report().recommendations || [];
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
    if (P.env) { out.push(h("h3", {}, "Environment")); out.push(generic(P.env, "env")); }
    return out;
  }

  // a section of the current run's report, rendered with its units, when it holds anything
  function reportPart(title, ...path) {
    let r = rep();
    for (const k of path) r = r && typeof r === "object" ? r[k] : undefined;
    if (r === undefined || r === null || (Array.isArray(r) && !r.length)) return [];
    return [h("h3", {}, title), generic(r, path[path.length - 1])];
  }

  const OP_COLS = () => [nameCol("name", "name"), { key: "kind", label: "kind" }, col("calls", "calls"),
    col("host_self_us", "host self"), col("host_total_us", "host total"), col("host_avg_us", "host avg"), col("host_max_us", "host max"),
    col("device_self_us", "device self"), col("device_total_us", "device total")];
  // a drill-down panel: the report's rows of `key` whose `field` is `value`, as a table
  function drillRows(title, key, field, value, cols, id, none) {
    return drillTable(title, (rep()[key] || []).filter((x) => x[field] === value), cols, id, none);
  }
  function drillTable(title, rows, cols, id, none, opts) {
    return [h("h4", {}, title), rows.length ? table(cols, rows, Object.assign({ id }, opts || {})) : h("div", { class: "muted", "data-testid": id }, none || "none in the report")];
  }
  const C = TorchscopeChain;
  function viewOperators() {
    const ops = rep().operators || [];
    if (!ops.length) return [h("h2", {}, "Operators"), empty("No host operators in this trace.")];
    const device = ops.some((o) => o.device_total_us);
    const by = device ? "device_total_us" : "host_total_us";
    const drill = h("div", { class: "drill", "data-testid": "op-drill" }, h("span", { class: "muted" }, "Click an operator for its input shapes, then a shape for its call stacks and the kernels it launched."));
    // op -> its input-shape rows -> (click one) its call stacks and the device work it launched
    const openShape = (o, box) => {
      const ks = C.kernels(rep(), o.name, o.input_dims), sum = C.sumUs(ks, "total_us");
      box.replaceChildren(h("h4", {}, `${o.name} · input shapes ${o.input_dims ?? DASH}`),
        ...drillTable("Python call stacks", C.stacks(rep(), o.name, o.input_dims), [nameCol("stack", "stack (innermost first)"), col("calls", "calls"),
          col("host_total_us", "host total"), col("host_self_us", "host self")], "drill-stacks", "none in the report (record with with_stack=True)"),
        ...drillTable("Kernels launched (by this op or the ops it calls)", ks, [nameCol("name", "kernel"), col("count", "calls"), col("total_us", "total"),
          col("op_share_pct", "share of the op"), col("self_total_us", "launched itself"), col("mean_us", "mean")], "drill-kernels",
          o.device_total_us ? null : "no device time"),
        ks.length ? h("div", { class: "muted", "data-testid": "drill-kernels-sum" }, `sum ${fmtUs(sum)} = the shape's device total ${fmtUs(o.device_total_us)}` +
          (ks.some((k) => k.name === C.OTHER) ? ` (the top kernels, then ${C.OTHER})` : "")) : null);
    };
    const open = (o) => {
      const rows = C.shapes(rep(), o.name);
      const box = h("div", { class: "drill", "data-testid": "shape-drill" }, h("span", { class: "muted" }, rows.length ? "Click an input shape for its call stacks and the kernels it launched." : ""));
      drill.replaceChildren(h("h3", {}, o.name),
        ...drillTable("By input shape", rows, [nameCol("input_dims", "input shapes"), col("calls", "calls"),
          col("host_total_us", "host total"), col("host_avg_us", "host avg"), col("device_self_us", "device self"), col("device_total_us", "device total")],
          "drill-shapes", "none in the report (its shapes are past the report's top rows)", { onRow: (x) => openShape(x, box) }), box);
      if (rows.length === 1) openShape(rows[0], box);
      drill.scrollIntoView({ block: "nearest" });
    };
    return [h("h2", {}, "Operators"), h("div", { class: "muted" }, (device ? "By device time (with the ops they call), then host time." : "By host time.") + " Click a row to drill down."),
      hbars(ops.slice(0, 12).map((o) => ({ k: o.name, v: o[by] })), fmtUs, "ops-chart"),
      table(OP_COLS(), ops, { id: "ops-table", onRow: open }), drill,
      ...reportPart("By input shape", "operators_by_shape"), ...reportPart("FLOPs", "flops"), ...reportPart("Python call stacks", "call_stacks")];
  }

  function viewKernels() {
    const ks = rep().kernels || [];
    if (!ks.length) return [h("h2", {}, "Kernels"), empty("No kernels in this trace (CPU-only run)."), ...reportPart("Time on the device", "temporal_breakdown")];
    const drill = h("div", { class: "drill", "data-testid": "kernel-drill" }, h("span", { class: "muted" }, "Click a kernel for the ops that launched it."));
    return [h("h2", {}, "Kernels"),
      hbars(ks.slice(0, 12).map((k) => ({ k: k.name, v: k.total_us })), fmtUs, "kernels-chart"),
      table([nameCol("name", "name"), col("count", "calls"), col("total_us", "total"), col("share_pct", "share"), col("mean_us", "mean"),
        col("min_us", "min"), col("max_us", "max"), col("occupancy_pct", "est. occupancy"), col("blocks_per_sm", "blocks per SM"),
        { key: "tensor_core", label: "Tensor Cores", fmt: (v) => (v ? "yes" : "no") }], ks, { id: "kernels-table", onRow: (k) => drill.replaceChildren(h("h3", {}, k.name),
        ...drillTable("Launched by (the innermost op)", C.launchers(rep(), k.name), [nameCol("op_name", "launching op"), col("count", "calls"), col("total_us", "total"),
          col("shapes", "input shapes")], "drill-launchers", "none of the op rows the report keeps lists it among its top kernels")) }),
      drill,
      ...reportPart("Kernels by op and input shape (with the ops each calls)", "kernels_by_op"), ...reportPart("Kernel types", "kernel_types"),
      ...reportPart("Time on the device", "temporal_breakdown"), ...reportPart("Launches", "launch_stats"),
      ...reportPart("Idle time per stream", "idle_time"), ...reportPart("Queue length per stream", "queue_length")];
  }

  function viewMemory() {
    const m = rep().memory || {}, peaks = m.peaks || [], curves = run().memory_curves || [];
    if (!peaks.length) return [h("h2", {}, "Memory"), empty("No memory events (record with profile_memory=True / torchscope run --memory).")];
    const out = [h("h2", {}, "Memory"), h("div", { class: "cards", "data-testid": "memory-cards" }, peaks.map((p) =>
      card(`${p.device} peak allocated`, `${fmtBytes(p.peak_allocated_bytes)} at ${fmt(p.peak_ts_us, "timestamp_us", START())}` + (p.peak_op ? ` in ${p.peak_op}` : ""))))];
    curves.forEach((c) => {
      out.push(h("h3", {}, `${c.device}: allocated and reserved over time`));
      const p = peaks.find((x) => x.device === c.device);
      const marks = p && !none(p.peak_ts_us) ? [{ ts: p.peak_ts_us - START(), v: p.peak_allocated_bytes, label: `peak ${fmtBytes(p.peak_allocated_bytes)}` + (p.peak_op ? ` in ${p.peak_op}` : "") }] : [];
      out.push(lineChart([{ name: "allocated", ts: c.allocated.offset_us, v: c.allocated.bytes }, { name: "reserved", ts: c.reserved.offset_us, v: c.reserved.bytes }], { id: "memory-chart", fmtY: fmtBytes, binary: true, marks }));
    });
    out.push(h("h3", {}, "Allocations by op (self: the op's own; total: with the ops it calls)"));
    out.push(table([nameCol("name", "op"), { key: "device", label: "device" }, col("allocations", "allocations"),
      col("self_allocated_bytes", "self allocated"), col("self_freed_bytes", "self freed"), col("total_allocated_bytes", "total allocated"),
      col("total_net_bytes", "total net")], m.by_op || [], { id: "memory-table" }));
    out.push(...reportPart("Possible leaks (allocated, never freed in the trace)", "memory", "leaks"));
    return out;
  }

  function viewModules() {
    const rows = rep().modules || [];
    if (!rows.length) return [h("h2", {}, "Modules"), empty("No nn.Module scopes in this trace (record with with_stack=True or with_modules=True).")];
    // the report's rows are paths in tree order: nest them by path
    const root = { children: [] }, byPath = {};
    rows.forEach((r) => {
      const node = { ...r, children: [] };
      byPath[r.path] = node;
      const up = r.path.includes("/") ? byPath[r.path.slice(0, r.path.lastIndexOf("/"))] : null;
      (up || root).children.push(node);
    });
    const total = Math.max(1e-9, ...root.children.map((c) => c.host_us));
    const device = rows.some((r) => r.device_us > 0); // a column of zeros says nothing
    function node(n, depth) {
      const row = h("span", { class: "row" }, h("span", { class: "bar", style: `width:${Math.max(1, (160 * n.host_us) / total)}px` }),
        h("button", { class: "link", "data-path": n.path, onclick: (e) => { e.preventDefault(); openOps(n); } }, n.module), h("span", { class: "muted" }, `host ${fmt(n.host_us, UNITS().host_us)}` + (device ? ` · device ${fmt(n.device_us, UNITS().device_us)}` : "") +
          ` · ${fmtCount(n.calls)} call${n.calls === 1 ? "" : "s"}`));
      if (!n.children.length) return h("li", {}, row);
      return h("li", {}, h("details", depth < 2 ? { open: true } : {}, h("summary", {}, row), h("ul", {}, n.children.map((c) => node(c, depth + 1)))));
    }
    const drill = h("div", { class: "drill", "data-testid": "module-drill" }, h("span", { class: "muted" }, "Click a module for the ops it calls itself."));
    function openOps(n) {
      drill.replaceChildren(h("h3", {}, n.path), ...drillRows("Ops it calls itself (its submodules' are theirs)", "module_ops", "path", n.path,
        [nameCol("name", "op"), col("calls", "calls"), col("host_us", "host total"), ...(device ? [col("device_us", "device total")] : [])], "drill-module-ops"));
      drill.scrollIntoView({ block: "nearest" });
    }
    return [h("h2", {}, "Modules"), h("div", { class: "tree", "data-testid": "module-tree" }, h("ul", {}, root.children.map((c) => node(c, 0)))), drill];
  }

  function viewDistributed() {
    const R = report() || {}, d = R.distributed;
    const out = [h("h2", {}, "Distributed")];
    if (!d) {
      const steps = rep().steps || [];
      if (!steps.some((x) => x.comm_overlap_us.communication_us)) return [...out, empty("One trace without communication; no per-rank data.")];
      out.push(h("h3", {}, "Computation and communication per step"));
      out.push(stackedBars(steps.map((x) => ({ step: x.step, ...x.comm_overlap_us })), ["computation_us", "communication_us", "overlap_us", "other_us"], "step", { id: "dist-chart", fmt: fmtUs }));
      return out;
    }
    out.push(stackedBars(d.ranks.map((x) => ({ ...x, run: x.rank })), ["computation_us", "communication_us"], "run", { id: "dist-chart", fmt: fmtUs }));
    out.push(table([nameCol("name", "run"), col("rank", "rank"), col("steps", "steps"), col("step_us", "avg step"),
      col("computation_us", "computation"), col("communication_us", "communication"), col("overlap_us", "overlap"),
      col("vs_fastest_pct", "vs fastest"), { key: "straggler", label: "straggler", fmt: (v) => (v ? "yes" : "") }], d.ranks, { id: "dist-table" }));
    if (!none(d.slowest_rank)) out.push(h("div", { class: "rec" }, h("div", { class: "t" }, `Slowest rank (most computation per step): ${d.slowest_rank}`)));
    if ((d.collectives || []).length) out.push(h("h3", {}, "Collectives"), generic(d.collectives, "collectives"));
    if ((d.wait_for_slowest || []).length) out.push(h("h3", {}, "Time waiting for the slowest rank"), generic(d.wait_for_slowest, "wait_for_slowest"));
    return out;
  }

  function viewDiff() {
    const d = state.payload.diff;
    if (!d || !d.report) return [h("h2", {}, "Diff"), empty("Compare two traces with: torchscope diff A B --html diff.html")];
    const D = d.report, U = d.units || {}, st = D.step_us || {};
    const signed = (v, unit) => (none(v) ? DASH : h("span", { class: v > 0 ? "pos" : v < 0 ? "neg" : "" }, (v > 0 ? "+" : "") + fmt(v, unit)));
    const out = [h("h2", {}, `Diff: ${d.a} → ${d.b}`),
      h("div", { class: "cards" }, card("step A", fmtUs(st.a)), card("step B", fmtUs(st.b)), card("change", (st.delta > 0 ? "+" : "") + fmtUs(st.delta)))];
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
    out.push(table([nameCol("name", "name"), { key: "what", label: "what" }, { key: "status", label: "status" },
      { key: "a_calls", label: "calls A", num: true, fmt: (v) => fmt(v, U.a_calls) }, { key: "b_calls", label: "calls B", num: true, fmt: (v) => fmt(v, U.b_calls) },
      { key: "a_us", label: "A", num: true, fmt: (v) => fmt(v, U.a_us) }, { key: "b_us", label: "B", num: true, fmt: (v) => fmt(v, U.b_us) },
      { key: "delta_us", label: "change", num: true, fmt: (v) => signed(v, U.delta_us) }], D.changes || [], { id: "diff-table" }));
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
      h("div", { class: "t" }, fd ? "First divergence" : "No divergence beyond tolerance"), fd ? generic(fd, "first_divergence") : null));
    if ((a.module_calls || []).length) {
      const fm = a.first_module_divergence;
      out.push(h("div", { class: fm ? "rec" : "card", "data-testid": "first-module-divergence" },
        h("div", { class: "t" }, fm ? "First divergent module" : "No module call diverged beyond tolerance"), fm ? generic(fm, "first_module_divergence") : null));
    }
    if ((a.ops || []).length) { out.push(h("h3", {}, "Per op")); out.push(generic(a.ops, "ops")); }
    if ((a.module_calls || []).length) { out.push(h("h3", {}, "Per module call")); out.push(generic(a.module_calls, "module_calls")); }
    if ((a.modules || []).length) { out.push(h("h3", {}, "Per module")); out.push(generic(a.modules, "modules")); }
    return out;
  }
  const accuracy = () => state.payload.accuracy || (report() || {}).accuracy || null;

  const TITLES = { meta: "The trace", steps: "Steps", breakdown_us: "Step time by category (average per step)",
    host_breakdown_us: "Host time by category (average per step)", devices: "Devices", comm_overlap: "Computation and communication (average per step)",
    operators: "Operators", operators_by_shape: "Operators by input shape", call_stacks: "Python call stacks", flops: "FLOPs",
    kernels: "Kernels", kernels_by_op: "Kernels by op and input shape", kernel_types: "Kernel types", temporal_breakdown: "Time on the device",
    comm_comp_overlap: "Communication hidden behind computation", launch_stats: "Launches", idle_time: "Idle time per stream",
    queue_length: "Queue length per stream", memory: "Memory", modules: "Modules", module_ops: "Ops by module", recommendations: "Recommendations",
    distributed: "Distributed", warnings: "Warnings", steps_count: "Steps" };
  const SKIP = ["units", "report_version", "kind", "ranks", "source"];
  function sections(r) {
    return Object.entries(r).filter(([k]) => !SKIP.includes(k)).flatMap(([k, v]) =>
      [h("h3", {}, TITLES[k] || pretty(k)), h("div", { class: "section", "data-section": k }, generic(v, k))]);
  }
  function viewReport() {
    const R = report();
    if (!R) return [h("h2", {}, "Full analysis report"), empty("The analysis report is not available for this trace.")];
    const out = [h("h2", {}, "Full analysis report"),
      h("div", { class: "muted" }, `Every section of \`torchscope report --json\` (version ${R.report_version}), with units; times are since the trace's first event. Source: ${R.source}`)];
    if (R.kind === "traceset") out.push(...sections(R), h("h2", {}, `Rank ${run().name}`));
    out.push(...sections(rep()));
    return out;
  }

  // -- timeline: timeline.js draws it; the page gives it the report's steps and the memory curves
  function viewTimeline() {
    const t = run().timeline;
    if (!t || !t.events) return [h("h2", {}, "Timeline"), empty("No events with a duration.")];
    const start = START();
    const steps = (rep().steps || []).map((x) => ({ step: x.step, start_ns: x.start_us * 1000 - t.t0_ns, dur_ns: x.dur_us * 1000 }));
    if (!start) steps.length = 0; // steps' timestamps need the trace's start
    const counters = (run().memory_curves || []).map((c) => ({ name: `${c.device} allocated`, offset_us: c.allocated.offset_us, bytes: c.allocated.bytes }));
    const body = TorchscopeTimeline.view(t, { fmtNs, fmtBytes, steps, counters, colors: COLORS, tip: $("#tip"),
      table: (cols, rows, id) => table(cols, rows, { id, sort: "total_ns" }) });
    return [h("h2", {}, "Timeline"),
      h("div", { class: "muted" }, "W/S zoom, A/D pan (as Perfetto); wheel zooms at the pointer, drag pans, shift-drag selects a range; click an event for its details and its kernels or launching op; search with Enter (shift+Enter: previous)."),
      body, h("div", { class: "tl-tools" }, h("button", { "data-testid": "export-chrome", onclick: () => exportChrome(t) }, "export Chrome trace (Perfetto)"))];
  }
  async function exportChrome(t) {
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

  // -- job view (torchscope.job): one summary for many runs, ranks and cycles ------------------
  // Self-contained: reads only payload.job (job.render.job_section); per-rank full views are
  // sibling HTML files named in job.runs[i].per_rank[j].views.
  function viewJob() {
    const J = state.payload.job || { runs: [] };
    const out = [h("h2", {}, "Job")];
    J.runs.forEach((R) => {
      const st = R.step_ns || {};
      out.push(h("h3", { "data-testid": "job-run" }, `${R.run}: ${R.ranks} rank(s), ${R.cycles} cycle(s)` + (R.backend ? `, ${R.backend}` : "")));
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
          { key: "min_step_ns", label: "shortest step", num: true, fmt: fmtNs }, { key: "median_step_ns", label: "median step", num: true, fmt: fmtNs },
          { key: "max_step_ns", label: "longest step", num: true, fmt: fmtNs }, { key: "slowest_rank", label: "rank of the longest", num: true }], R.cycle_table, { id: "job-cycles" }));
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
    ["flame", "Flame", () => TorchscopeFlame.view(run().flame, state.payload.hotspots_flame, (state.payload.diff || {}).flame), () => true],
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
    // a torchscope run of several cycles opens on the latest, the one its terminal shows in full
    // (the first holds the setup); a later payload (serve) keeps the user's choice
    if (state.payload === null && P.run && (P.runs || []).length > 1) state.run = P.runs.length - 1;
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
