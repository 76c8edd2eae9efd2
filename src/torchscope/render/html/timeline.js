// @ts-check
// The timeline for the torchscope dashboard: every event with a duration, on a canvas, one track
// per process/thread and per device stream (grouped under their process or device), a memory
// counter track, step markers. Level of detail: each row's events are indexed by start time, and
// where events are narrower than a pixel the renderer draws one rectangle and jumps by binary
// search to the next pixel, so a frame costs rows x pixels, not events.
// Keys as Perfetto: W/S zoom, A/D pan. Wheel zooms at the pointer, drag pans, shift-drag selects
// a range (aggregate table), click shows an event's details (args, shapes, stack, ids, launch
// parameters) and arrows to the kernels it launched or the op that launched it.
// Every string from a trace is drawn on the canvas or set as textContent: never parsed as HTML.
// The page inlines this file before app.js; it defines one global, TorchscopeTimeline.

/**
 * @typedef {object} Track
 * @property {string} label
 * @property {string} group   the process or device it is drawn under
 * @property {number} pid
 * @property {number} tid
 * @property {number} device  -1 on the host
 * @property {number} rows
 */

/**
 * The timeline as render/payload.py writes it.
 * @typedef {object} TimelineData
 * @property {number} events
 * @property {number} total
 * @property {number} t0_ns
 * @property {Track[]} tracks
 * @property {string[]} names
 * @property {string[]} kinds
 * @property {[string, string][]} layout  the packed arrays in order: [field, numpy dtype]
 * @property {string} packed   base64 of gzip of the arrays
 * @property {string} details  base64 of gzip of JSON: {index: number[], column: values[]}
 */

/**
 * @typedef {object} Columns
 * @property {Float64Array} start
 * @property {Float64Array} dur
 * @property {Uint32Array} name
 * @property {Int32Array} parent
 * @property {Int32Array} op
 * @property {Uint16Array} track
 * @property {Uint8Array} row
 * @property {Uint8Array} kind
 */

/** @typedef {{step: number | string, start_ns: number, dur_ns: number}} StepSpan  step: a number, or "first–last" for a run of steps */
/** @typedef {{name: string, offset_us: number[], bytes: number[]}} Counter */
/** @typedef {{key: string, label: string, num?: boolean, fmt?: (v: any) => string, cls?: string}} Column */

/**
 * What the page gives the timeline: its formatters, its table, the report's steps.
 * @typedef {object} TimelineOptions
 * @property {(ns: number) => string} fmtNs
 * @property {(b: number) => string} fmtBytes
 * @property {StepSpan[]} steps
 * @property {Counter[]} counters
 * @property {string[]} colors
 * @property {HTMLElement} tip
 * @property {(cols: Column[], rows: Record<string, any>[], id: string) => HTMLElement} table
 */

/**
 * What a mounted timeline offers its tests.
 * @typedef {object} TimelineController
 * @property {() => [number, number]} range                  the visible range, ns
 * @property {(x0: number, x1: number) => void} show
 * @property {(e: number) => {x: number, y: number, w: number, h: number} | null} rectOf  CSS px in the canvas
 * @property {(e: number) => Promise<void>} select
 * @property {() => number} selected
 * @property {(q: string) => number} search                 the match count
 * @property {Columns} cols
 */

const TorchscopeTimeline = (() => {
  const RH = 14, GH = 16, CH = 44, TOP = 32, LABEL = 200;
  const SIZES = /** @type {Record<string, number>} */ ({ f8: 8, i4: 4, u4: 4, u2: 2, u1: 1 });

  /** @param {string} b64 @returns {Promise<ArrayBuffer>} */
  async function inflate(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).arrayBuffer();
  }

  /** @type {WeakMap<TimelineData, Promise<Columns>>} */
  const decoded = new WeakMap();
  /** @param {TimelineData} t @returns {Promise<Columns>} */
  function decode(t) {
    let p = decoded.get(t);
    if (!p) {
      p = inflate(t.packed).then((buf) => {
        const n = t.events, out = /** @type {Record<string, any>} */ ({});
        let off = 0;
        for (const [field, dt] of t.layout) {
          const size = SIZES[dt];
          const Type = { f8: Float64Array, i4: Int32Array, u4: Uint32Array, u2: Uint16Array, u1: Uint8Array }[/** @type {"f8"} */ (dt)];
          out[field] = new Type(buf, off, n);
          off += Math.ceil((n * size) / 8) * 8;
        }
        return /** @type {Columns} */ (out);
      });
      decoded.set(t, p);
    }
    return p;
  }

  /** @typedef {{index: number[], columns: [string, any[]][]}} DetailTable */
  /** @type {WeakMap<TimelineData, Promise<DetailTable>>} */
  const detailCache = new WeakMap();
  /** The details table, inflated once (the page starts it in the background after the first frame).
   * @param {TimelineData} t @returns {Promise<DetailTable>} */
  function details(t) {
    let p = detailCache.get(t);
    if (!p) {
      p = (t.details ? inflate(t.details) : Promise.resolve(new ArrayBuffer(0))).then((buf) => {
        if (!buf.byteLength) return { index: [], columns: [] };
        const table = JSON.parse(new TextDecoder().decode(buf));
        return { index: table.index, columns: Object.keys(table).filter((k) => k !== "index").map((k) => /** @type {[string, any[]]} */ ([k, table[k]])) };
      });
      detailCache.set(t, p);
    }
    return p;
  }
  /** An event's details: [column, value] where it has one. @param {DetailTable} d @param {number} e @returns {[string, any][]} */
  function detailOf(d, e) {
    const k = lowerBound((q) => d.index[q], e, 0, d.index.length);
    if (d.index[k] !== e) return [];
    return d.columns.filter(([, v]) => v[k] !== null && v[k] !== undefined).map(([c, v]) => /** @type {[string, any]} */ ([c, v[k]]));
  }

  /** first k in [lo, hi) with key(k) >= v, for a non-decreasing key
   * @param {(k: number) => number} key @param {number} v @param {number} lo @param {number} hi */
  function lowerBound(key, v, lo, hi) {
    while (lo < hi) { const m = (lo + hi) >>> 1; if (key(m) < v) lo = m + 1; else hi = m; }
    return lo;
  }

  /** A round step (1, 2 or 5 x 10^n) near span/count. @param {number} span @param {number} count */
  function niceStep(span, count) {
    const raw = span / Math.max(1, count), p = 10 ** Math.floor(Math.log10(raw)), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
  }

  /**
   * @param {string} tag @param {Record<string, string>} [attrs] @param {string} [text]
   * @returns {HTMLElement}
   */
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /**
   * The lanes top to bottom: group headers, event rows, counter tracks.
   * @typedef {{type: "group", label: string, y: number, h: number} | {type: "row", track: number, row: number, label: string, y: number, h: number} | {type: "counter", counter: number, label: string, y: number, h: number}} Lane
   */

  /**
   * Draw the timeline into `host`; return its controller.
   * @param {HTMLElement} host @param {TimelineData} t @param {Columns} C @param {TimelineOptions} opt
   * @returns {TimelineController}
   */
  function mount(host, t, C, opt) {
    const n = t.events;
    /** @type {Lane[]} */
    const lanes = [];
    /** @type {number[][]} */
    const laneOf = t.tracks.map(() => []);
    let y = TOP, lastGroup = "";
    opt.counters.forEach((c, i) => { lanes.push({ type: "counter", counter: i, label: c.name, y, h: CH }); y += CH; });
    t.tracks.forEach((tr, ti) => {
      if (tr.group !== lastGroup) { lanes.push({ type: "group", label: tr.group, y, h: GH }); y += GH; lastGroup = tr.group; }
      for (let r = 0; r < tr.rows; r++) {
        laneOf[ti][r] = lanes.length;
        lanes.push({ type: "row", track: ti, row: r, label: r === 0 ? tr.label : "", y, h: RH });
        y += RH;
      }
    });
    const height = y + 4;
    // per lane: its events by start (the arrays are sorted by start), and the running max of their ends
    const counts = new Uint32Array(lanes.length);
    for (let i = 0; i < n; i++) counts[laneOf[C.track[i]][C.row[i]]]++;
    const idx = Array.from(counts, (c) => new Uint32Array(c));
    const pmax = Array.from(counts, (c) => new Float64Array(c));
    const fill = new Uint32Array(lanes.length);
    for (let i = 0; i < n; i++) {
      const l = laneOf[C.track[i]][C.row[i]], k = fill[l]++;
      idx[l][k] = i;
      pmax[l][k] = Math.max(k ? pmax[l][k - 1] : -Infinity, C.start[i] + C.dur[i]);
    }
    let end = 1;
    for (let i = 0; i < n; i++) end = Math.max(end, C.start[i] + C.dur[i]);

    const view = { x0: 0, x1: end };
    let selected = -1, rangeSel = /** @type {[number, number] | null} */ (null);
    /** @type {number[]} */ let linked = [];
    /** @type {Uint32Array} */ let matches = new Uint32Array(0);
    let matchAt = -1;

    const canvas = /** @type {HTMLCanvasElement} */ (el("canvas", { "data-testid": "timeline-canvas", tabindex: "0" }));
    const wrap = el("div", { id: "tl-wrap" });
    wrap.append(canvas);
    const info = el("span", { class: "muted", "data-testid": "timeline-range" });
    const detail = el("div", { class: "sel", "data-testid": "timeline-selection" }, "Click an event for its details; shift-drag to select a range.");
    const agg = el("div", { "data-testid": "timeline-aggregate" });
    const search = /** @type {HTMLInputElement} */ (el("input", { class: "filter", placeholder: "search events by name…", "data-testid": "timeline-search" }));
    const found = el("span", { class: "muted", "data-testid": "timeline-search-count" });
    const stepPick = /** @type {HTMLSelectElement} */ (el("select", { "data-testid": "timeline-step" }));
    stepPick.append(el("option", { value: "" }, "zoom to step…"));
    opt.steps.forEach((s, i) => stepPick.append(el("option", { value: String(i) }, `step ${s.step}`)));

    /** @param {number} e */
    const laneY = (e) => lanes[laneOf[C.track[e]][C.row[e]]].y;
    const width = () => Math.max(600, wrap.clientWidth || 1200);
    const scale = () => (width() - LABEL) / (view.x1 - view.x0);

    /** @param {number} e */
    function rectOf(e) {
      if (e < 0 || e >= n) return null;
      const s = scale(), a = (C.start[e] - view.x0) * s, b = (C.start[e] + C.dur[e] - view.x0) * s;
      return { x: LABEL + a, y: laneY(e), w: Math.max(1, b - a), h: RH };
    }

    let drawn = 0;
    function draw() {
      const W = width(), dpr = window.devicePixelRatio || 1;
      if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(height * dpr)) {
        canvas.width = Math.round(W * dpr); canvas.height = Math.round(height * dpr);
        canvas.style.width = W + "px"; canvas.style.height = height + "px";
      }
      const g = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W, height);
      const x0 = view.x0, x1 = view.x1, s = (W - LABEL) / (x1 - x0), px = 1 / s;
      g.font = "10px sans-serif";
      drawn = 0;
      // step shading
      opt.steps.forEach((st, i) => {
        const a = LABEL + (st.start_ns - x0) * s, b = LABEL + (st.start_ns + st.dur_ns - x0) * s;
        if (b < LABEL || a > W) return;
        g.fillStyle = i % 2 ? "#f6f7fb" : "#ffffff";
        g.fillRect(Math.max(LABEL, a), TOP, Math.min(W, b) - Math.max(LABEL, a), height - TOP);
      });
      for (let l = 0; l < lanes.length; l++) {
        const lane = lanes[l];
        if (lane.type === "group") { g.fillStyle = "#eef0f5"; g.fillRect(0, lane.y, W, GH); continue; }
        if (lane.type === "counter") { drawCounter(g, lane, opt.counters[lane.counter], s, W); continue; }
        const I = idx[l], P = pmax[l], m = I.length;
        let k = lowerBound((j) => P[j], x0, 0, m);
        let pa = -1, pb = -1, pk = 0;
        const flush = () => { if (pa >= 0) { g.fillStyle = opt.colors[pk % opt.colors.length]; g.fillRect(LABEL + pa, lane.y + 1, Math.max(1, pb - pa), RH - 2); drawn++; pa = -1; } };
        while (k < m) {
          const e = I[k], st = C.start[e];
          if (st > x1) break;
          const en = st + C.dur[e];
          if (en < x0) { k++; continue; }
          const a = Math.max(-1, (st - x0) * s), b = Math.min(W - LABEL + 1, (en - x0) * s);
          if (b - a < 1) {
            if (pa >= 0 && a <= pb + 1) pb = Math.max(pb, b);
            else { flush(); pa = a; pb = Math.max(b, a + 1); pk = C.kind[e]; }
            // jump to the next pixel; the event starting just before it may reach past it
            const next = x0 + (Math.floor(pb) + 1) * px;
            const j = lowerBound((q) => C.start[I[q]], next, k + 1, m);
            k = j - 1 > k && C.start[I[j - 1]] + C.dur[I[j - 1]] > next ? j - 1 : j;
            continue;
          }
          flush();
          g.fillStyle = opt.colors[C.kind[e] % opt.colors.length];
          g.fillRect(LABEL + a, lane.y + 1, b - a, RH - 2);
          drawn++;
          if (b - a > 36) {
            const name = t.names[C.name[e]], room = Math.floor((b - a - 4) / 6);
            g.fillStyle = "#fff";
            g.fillText(name.length > room ? name.slice(0, Math.max(1, room - 1)) + "…" : name, LABEL + Math.max(0, a) + 2, lane.y + 10);
          }
          k++;
        }
        flush();
      }
      // the selection, the search hit, the arrows
      if (rangeSel) {
        const a = LABEL + (rangeSel[0] - x0) * s, b = LABEL + (rangeSel[1] - x0) * s;
        g.fillStyle = "rgba(59,91,219,0.12)"; g.fillRect(a, TOP, b - a, height - TOP);
      }
      for (const e of [selected, matchAt >= 0 ? matches[matchAt] : -1]) {
        const r = rectOf(e);
        if (r) { g.strokeStyle = "#c2255c"; g.lineWidth = 2; g.strokeRect(r.x - 1, r.y, r.w + 2, r.h); }
      }
      const from = rectOf(selected);
      if (from) {
        g.strokeStyle = "#c2255c"; g.fillStyle = "#c2255c"; g.lineWidth = 1.2;
        for (const e of linked.slice(0, 200)) {
          const to = rectOf(e);
          if (!to) continue;
          const fx = Math.min(W, Math.max(LABEL, from.x + Math.min(from.w, 4))), fy = from.y + RH / 2;
          const tx = Math.min(W, Math.max(LABEL, to.x)), ty = to.y + RH / 2;
          g.beginPath(); g.moveTo(fx, fy); g.bezierCurveTo(fx + 30, fy, tx - 30, ty, tx, ty); g.stroke();
          g.beginPath(); g.moveTo(tx, ty); g.lineTo(tx - 6, ty - 3); g.lineTo(tx - 6, ty + 3); g.fill();
        }
      }
      // labels, ruler
      g.fillStyle = "#fff"; g.fillRect(0, TOP, LABEL, height - TOP);
      g.font = "11px sans-serif";
      for (const lane of lanes) {
        if (lane.type === "group") { g.fillStyle = "#eef0f5"; g.fillRect(0, lane.y, LABEL, GH); g.fillStyle = "#1d2330"; g.font = "bold 11px sans-serif"; g.fillText(lane.label.slice(0, 32), 4, lane.y + 12); g.font = "11px sans-serif"; continue; }
        if (!lane.label) continue;
        g.fillStyle = "#e2e5eb"; g.fillRect(0, lane.y, W, 1);
        g.fillStyle = "#1d2330"; g.fillText(lane.label.slice(0, 32), 10, lane.y + 11);
      }
      g.fillStyle = "#fff"; g.fillRect(0, 0, W, TOP);
      g.fillStyle = "#6b7385"; g.font = "10px sans-serif";
      const step = niceStep(x1 - x0, 8);
      for (let v = Math.ceil(x0 / step) * step; v <= x1; v += step) {
        const x = LABEL + (v - x0) * s;
        g.fillRect(x, TOP - 6, 1, 6); g.fillText(opt.fmtNs(v).replace(/(\.\d*?)0+(?=\s)/, "$1").replace(/\.(?=\s)/, ""), x + 2, 11);
      }
      g.fillStyle = "#3b5bdb";
      opt.steps.forEach((st) => { const x = LABEL + (st.start_ns - x0) * s; if (x >= LABEL && x <= W) { g.fillRect(x, 14, 1, TOP - 14); g.fillText(`step ${st.step}`, x + 3, TOP - 8); } });
      g.fillStyle = "#6b7385"; g.fillRect(0, TOP - 1, W, 1);
      info.textContent = ` ${opt.fmtNs(x0)} – ${opt.fmtNs(x1)} (${opt.fmtNs(x1 - x0)} shown; ${drawn} rectangles for ${n} events` +
        (t.total > n ? `; the ${n} longest of ${t.total} kept` : "") + ")";
      canvas.dataset.x0 = String(x0); canvas.dataset.x1 = String(x1); canvas.dataset.drawn = String(drawn);
    }

    /** @param {CanvasRenderingContext2D} g @param {Lane} lane @param {Counter} c @param {number} s @param {number} W */
    function drawCounter(g, lane, c, s, W) {
      const max = Math.max(1, ...c.bytes), base = lane.y + lane.h - 3, hgt = lane.h - 8;
      g.fillStyle = "#fff4e6"; g.fillRect(LABEL, lane.y, W - LABEL, lane.h);
      g.beginPath();
      const first = c.offset_us.length ? Math.min(W, Math.max(LABEL, LABEL + (c.offset_us[0] * 1000 - view.x0) * s)) : LABEL;
      g.moveTo(first, base);
      let px = first, py = base;
      for (let i = 0; i < c.offset_us.length; i++) {
        const x = Math.min(W, Math.max(LABEL, LABEL + (c.offset_us[i] * 1000 - view.x0) * s));
        const yv = base - (c.bytes[i] / max) * hgt;
        g.lineTo(x, py); g.lineTo(x, yv); // a step curve: the value holds until the next sample
        px = x; py = yv;
      }
      g.lineTo(W, py); g.lineTo(W, base); g.lineTo(px, base); g.closePath();
      g.fillStyle = "rgba(240,140,0,0.45)"; g.fill();
      g.fillStyle = "#6b7385"; g.fillText(`max ${opt.fmtBytes(max)}`, W - 90, lane.y + 10);
    }

    /** keep the view on the trace: panning or zooming went on into an empty view at negative
     * times ("-994.137 ms – -749.819 ms (0 rectangles)"); a tenth of the view may lie outside */
    function within() {
      const span = view.x1 - view.x0, lo = -span * 0.1, hi = end + span * 0.1 - span;
      view.x0 = Math.min(Math.max(view.x0, lo), Math.max(lo, hi)); view.x1 = view.x0 + span;
    }
    /** @param {number} a @param {number} b */
    function show(a, b) {
      const span = Math.max(1000, Math.min(end * 1.2, b - a));
      const c = (a + b) / 2;
      view.x0 = c - span / 2; view.x1 = view.x0 + span; within(); draw();
    }
    /** @param {number} f @param {number} [atX] */
    function zoom(f, atX) {
      const frac = atX === undefined ? 0.5 : Math.min(1, Math.max(0, (atX - LABEL) / (width() - LABEL)));
      const span = view.x1 - view.x0, c = view.x0 + frac * span, ns = Math.max(1000, Math.min(end * 1.2, span * f));
      view.x0 = c - frac * ns; view.x1 = view.x0 + ns; within(); draw();
    }
    /** @param {number} f */
    function pan(f) { const d = (view.x1 - view.x0) * f; view.x0 += d; view.x1 += d; within(); draw(); }

    /** @param {MouseEvent} ev @returns {[number, number]} ns under the pointer, lane index */
    function at(ev) {
      const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
      const ns = view.x0 + ((x - LABEL) / (width() - LABEL)) * (view.x1 - view.x0);
      let l = -1;
      for (let i = 0; i < lanes.length; i++) if (yy >= lanes[i].y && yy < lanes[i].y + lanes[i].h) l = i;
      return [x < LABEL ? NaN : ns, l];
    }
    /** @param {MouseEvent} ev */
    function hit(ev) {
      const [ns, l] = at(ev);
      if (l < 0 || Number.isNaN(ns) || lanes[l].type !== "row") return -1;
      const I = idx[l], P = pmax[l], slack = 3 / scale();
      let best = -1;
      for (let k = lowerBound((j) => P[j], ns - slack, 0, I.length); k < I.length && C.start[I[k]] <= ns + slack; k++) {
        const e = I[k];
        if (C.start[e] + C.dur[e] + slack >= ns && (best < 0 || C.dur[e] < C.dur[best])) best = e;
      }
      return best;
    }

    /** the kernels (device work) an op launched, itself or through the ops it calls */
    function launchedBy(/** @type {number} */ e) {
      /** @type {number[]} */ const out = [];
      for (let i = 0; i < n; i++) {
        let o = C.op[i];
        if (o < 0 || t.tracks[C.track[i]].device < 0) continue;
        for (let d = 0; o >= 0 && d < 64; d++) { if (o === e) { out.push(i); break; } o = C.parent[o]; }
      }
      return out;
    }

    /** @param {number} e */
    async function select(e) {
      selected = e; linked = [];
      if (e < 0) { detail.textContent = "Click an event for its details; shift-drag to select a range."; draw(); return; }
      const tr = t.tracks[C.track[e]], kind = t.kinds[C.kind[e]];
      const dl = el("dl", { class: "kv", "data-testid": "event-details" });
      /** @param {string} k @param {string | Node} v */
      const add = (k, v) => { dl.append(el("dt", {}, k)); const dd = el("dd"); dd.append(v); dl.append(dd); };
      add("name", t.names[C.name[e]]);
      add("kind", kind);
      add("track", `${tr.group} · ${tr.label}`);
      add("start", opt.fmtNs(C.start[e]) + " since the trace's start");
      add("duration", opt.fmtNs(C.dur[e]));
      for (const [k, v] of detailOf(await details(t), e)) add(k.replace(/_/g, " "), typeof v === "string" ? v : String(v));
      // the stack: the enclosing events, innermost first
      /** @type {string[]} */ const stack = [];
      for (let p = C.parent[e], d = 0; p >= 0 && d < 64; p = C.parent[p], d++) stack.push(t.names[C.name[p]]);
      if (stack.length) add("stack", el("pre", {}, stack.join("\n")));
      const jump = (/** @type {number} */ j, /** @type {string} */ text, /** @type {string} */ id) => {
        const b = el("button", { class: "btn", "data-testid": id }, text);
        b.addEventListener("click", () => { const r = C.dur[j] > view.x1 - view.x0 ? [C.start[j], C.start[j] + C.dur[j]] : [view.x0, view.x1];
          const c = C.start[j] + C.dur[j] / 2, w = r[1] - r[0]; show(c - w / 2, c + w / 2); void select(j); });
        return b;
      };
      if (C.op[e] >= 0) {
        linked = [C.op[e]];
        add("launched by", jump(C.op[e], "↖ " + t.names[C.name[C.op[e]]], "goto-launcher"));
      } else if (tr.device < 0) {
        linked = launchedBy(e);
        if (linked.length) {
          const box = el("div", { "data-testid": "launched-kernels" });
          box.append(el("div", { class: "muted" }, `launched ${linked.length} kernels/copies (arrows on the timeline)`));
          linked.slice(0, 30).forEach((k) => box.append(jump(k, "↘ " + t.names[C.name[k]] + " · " + opt.fmtNs(C.dur[k]), "goto-kernel")));
          add("launched", box);
        }
      }
      detail.replaceChildren(dl);
      detail.dataset.event = String(e);
      draw();
    }

    /** @param {string} q */
    function doSearch(q) {
      const needle = q.trim().toLowerCase();
      const t0 = performance.now();
      if (!needle) { matches = new Uint32Array(0); matchAt = -1; found.textContent = ""; draw(); return 0; }
      const hitName = new Uint8Array(t.names.length);
      t.names.forEach((nm, i) => { if (nm.toLowerCase().includes(needle)) hitName[i] = 1; });
      let count = 0;
      for (let i = 0; i < n; i++) count += hitName[C.name[i]];
      matches = new Uint32Array(count);
      for (let i = 0, k = 0; i < n; i++) if (hitName[C.name[i]]) matches[k++] = i;
      matchAt = -1;
      found.textContent = count ? ` ${count} matches` : " no match";
      // the time to the result: matches counted, the view on the first, its details shown
      const done = () => { found.dataset.ms = String(performance.now() - t0); found.dataset.count = String(count); };
      if (count) void step(1).then(done);
      else {
        // the last selection's details would read as this search's result: cleared, and said why
        void select(-1).then(() => {
          detail.textContent = `No event on the timeline is named like "${q.trim()}" (instant events and events without a duration are not drawn).`;
          done();
        });
      }
      return count;
    }
    /** @param {number} d @returns {Promise<void>} */
    async function step(d) {
      if (!matches.length) return;
      matchAt = (matchAt + d + matches.length) % matches.length;
      // keep the zoom where the match is visible and not wider than the view; else frame it
      const e = matches[matchAt], cur = view.x1 - view.x0, px = C.dur[e] * scale();
      const span = px >= 3 && C.dur[e] < cur ? cur : Math.max(C.dur[e] * 20, 1000);
      show(C.start[e] + C.dur[e] / 2 - span / 2, C.start[e] + C.dur[e] / 2 + span / 2);
      found.textContent = ` ${matchAt + 1} of ${matches.length} matches`;
      await select(e);
    }

    /** the range's aggregate: per name, the events overlapping it and their time inside it */
    function aggregate(/** @type {number} */ a, /** @type {number} */ b) {
      /** @type {Map<number, {name: string, kind: string, count: number, total_ns: number}>} */
      const by = new Map();
      let sum = 0;
      for (let i = 0; i < n && C.start[i] < b; i++) {
        const inside = Math.min(b, C.start[i] + C.dur[i]) - Math.max(a, C.start[i]);
        if (inside <= 0) continue;
        const key = C.name[i] * 256 + C.kind[i];
        let r = by.get(key);
        if (!r) { r = { name: t.names[C.name[i]], kind: t.kinds[C.kind[i]], count: 0, total_ns: 0 }; by.set(key, r); }
        r.count++; r.total_ns += inside; sum += inside;
      }
      const rows = [...by.values()].sort((p, q) => q.total_ns - p.total_ns);
      agg.replaceChildren(el("h3", {}, `Selected range ${opt.fmtNs(a)} – ${opt.fmtNs(b)} (${opt.fmtNs(b - a)}): ${rows.length} names, time inside the range`),
        opt.table([{ key: "name", label: "name", cls: "name" }, { key: "kind", label: "kind" }, { key: "count", label: "events", num: true, fmt: String },
          { key: "total_ns", label: "time in range", num: true, fmt: opt.fmtNs }], rows, "range-table"));
      agg.dataset.a = String(a); agg.dataset.b = String(b); agg.dataset.totalNs = String(sum);
    }

    // -- input ---------------------------------------------------------------------------
    let lastX = /** @type {number | undefined} */ (undefined);
    canvas.addEventListener("wheel", (ev) => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.25 : 0.8, ev.offsetX); }, { passive: false });
    /** @type {{x: number, x0: number, x1: number, moved: boolean, range: boolean, ns: number} | null} */
    let drag = null;
    canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, x0: view.x0, x1: view.x1, moved: false, range: ev.shiftKey, ns: at(ev)[0] }; canvas.focus(); });
    window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
    canvas.addEventListener("mousemove", (ev) => {
      lastX = ev.offsetX;
      if (drag && ev.buttons) {
        if (Math.abs(ev.clientX - drag.x) > 2) drag.moved = true;
        if (drag.range) {
          const ns = at(ev)[0];
          if (!Number.isNaN(ns) && !Number.isNaN(drag.ns)) { rangeSel = [Math.min(drag.ns, ns), Math.max(drag.ns, ns)]; draw(); }
          return;
        }
        const dx = ((ev.clientX - drag.x) / (width() - LABEL)) * (drag.x1 - drag.x0);
        view.x0 = drag.x0 - dx; view.x1 = drag.x1 - dx; within(); draw(); return;
      }
      const e = hit(ev);
      if (e < 0) { opt.tip.hidden = true; return; }
      opt.tip.textContent = `${t.names[C.name[e]]} · ${t.kinds[C.kind[e]]} · ${opt.fmtNs(C.dur[e])}`;
      opt.tip.style.left = ev.clientX + 12 + "px"; opt.tip.style.top = ev.clientY + 12 + "px"; opt.tip.hidden = false;
    });
    canvas.addEventListener("mouseup", () => { if (drag && drag.range && drag.moved && rangeSel) aggregate(rangeSel[0], rangeSel[1]); });
    canvas.addEventListener("mouseleave", () => { opt.tip.hidden = true; });
    canvas.addEventListener("click", (ev) => { if (drag && drag.moved) return; void select(hit(ev)); });
    /** @param {KeyboardEvent} ev */
    const onKey = (ev) => {
      if (!canvas.isConnected) { document.removeEventListener("keydown", onKey); return; }
      const target = /** @type {HTMLElement | null} */ (ev.target);
      if (target && (target.tagName === "INPUT" || target.tagName === "SELECT" || target.tagName === "TEXTAREA")) return;
      const k = ev.key.toLowerCase();
      if (k === "w") zoom(0.8, lastX); else if (k === "s") zoom(1.25, lastX);
      else if (k === "a") pan(-0.1); else if (k === "d") pan(0.1);
      else return;
      ev.preventDefault();
    };
    document.addEventListener("keydown", onKey);
    search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { if (ev.shiftKey) step(-1); else if (matchAt < 0 || search.dataset.q !== search.value) { search.dataset.q = search.value; doSearch(search.value); } else step(1); } });
    stepPick.addEventListener("change", () => { const s = opt.steps[Number(stepPick.value)]; if (s) show(s.start_ns, s.start_ns + s.dur_ns); });
    const onResize = () => { if (canvas.isConnected) draw(); else window.removeEventListener("resize", onResize); };
    window.addEventListener("resize", onResize);

    const button = (/** @type {string} */ id, /** @type {string} */ text, /** @type {() => void} */ fn) => { const b = el("button", { "data-testid": id }, text); b.addEventListener("click", fn); return b; };
    const tools = el("div", { class: "tl-tools" });
    tools.append(button("zoom-in", "zoom in", () => zoom(0.5)), button("zoom-out", "zoom out", () => zoom(2)),
      button("zoom-reset", "reset", () => { view.x0 = 0; view.x1 = end; draw(); }), stepPick,
      search, button("search-prev", "◀", () => step(-1)), button("search-next", "▶", () => { if (search.dataset.q !== search.value) { search.dataset.q = search.value; doSearch(search.value); } else step(1); }), found);
    host.replaceChildren(tools, info, wrap, detail, agg);
    draw();
    setTimeout(() => { void details(t); }, 50); // inflate the details while the user looks
    /** @type {TimelineController} */
    const ctl = { range: () => [view.x0, view.x1], show, rectOf, select, selected: () => selected, search: doSearch, cols: C };
    controllers.set(canvas, ctl);
    return ctl;
  }

  /** @type {WeakMap<HTMLCanvasElement, TimelineController>} */
  const controllers = new WeakMap();

  /**
   * The Timeline tab's body: decoding is asynchronous (the browser inflates the arrays).
   * @param {TimelineData} t @param {TimelineOptions} opt @returns {HTMLElement}
   */
  function view(t, opt) {
    const host = el("div", { "data-testid": "timeline" }, "Inflating the timeline…");
    decode(t).then((C) => { mount(host, t, C, opt); host.dataset.ready = "1"; })
      .catch((err) => { host.textContent = `The timeline could not be decoded: ${err}`; });
    return host;
  }

  return { view, decode, niceStep, controllerOf: (/** @type {HTMLCanvasElement} */ c) => controllers.get(c) };
})();
