// @ts-check
// The dashboard's charts (SVG): stacked bars per step, horizontal bars, a time series with
// marks; round ticks from charts.js. The page inlines this file before app.js; it defines one
// global, TorchscopePlots.

const TorchscopePlots = (() => {
  const { fmtUs, pretty } = TorchscopeFormat;
  const { COLORS, h, s, empty, legend } = TorchscopeDom;
  /** @typedef {(v: number) => string} Fmt */
  /** One bar per row (a step), stacked by category.
   * @param {Record<string, any>[]} rows @param {string[]} cats @param {string} xKey
   * @param {{id: string, fmt: Fmt, binary?: boolean}} opts */
  function stackedBars(rows, cats, xKey, opts) {
    const W = 900, H = 240, L = 86, B = 24, n = rows.length;
    const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-testid": opts.id });
    const tk = TorchscopeCharts.ticks(Math.max(0, ...rows.map((r) => cats.reduce((a, c) => a + (r[c] || 0), 0))), 4, opts.binary);
    const max = tk[tk.length - 1];
    // every bar inside the chart: 2,000 step rows are 0.4 px each (with a 1 px floor they ran to
    // 2,100 px of a 900 px chart, and the last 60 % were cut off)
    const bw = (W - L - 10) / Math.max(n, 1), gap = bw >= 4 ? 1 : 0;
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
          const rect = s("rect", { x: L + i * bw + gap, y: y - hgt, width: Math.max(0.3, bw - 2 * gap), height: hgt, fill: COLORS[j % COLORS.length] });
          rect.appendChild(s("title", {}, `${xKey} ${r[xKey]} · ${pretty(c)}: ${opts.fmt(r[c])}`));
          svg.appendChild(rect);
          y -= hgt;
        }
      });
      if (n <= 40 || i % Math.ceil(n / 20) === 0) svg.appendChild(s("text", { x: L + i * bw + bw / 2, y: H - 8, "text-anchor": "middle" }, r[xKey]));
    });
    return h("div", {}, legend(cats.map(pretty)), svg);
  }
  /** @param {{k: string, v: number}[]} items @param {Fmt} fmtv @param {string} id */
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
  /** @param {{name: string, ts: number[], v: number[]}[]} series
   * @param {{id: string, fmtY: Fmt, binary?: boolean, marks?: {ts: number, v: number, label: string}[]}} opts */
  function lineChart(series, opts) {
    const W = 900, H = 260, L = 80, B = 28, T = 14;
    const svg = s("svg", { width: W, height: H, "data-testid": opts.id });
    const xs = series.flatMap((x) => x.ts), ys = series.flatMap((x) => x.v);
    if (!xs.length) return empty("no samples");
    const x0 = Math.min(...xs), xt = TorchscopeCharts.ticks(Math.max(...xs), 6), x1 = xt[xt.length - 1];
    const yt = TorchscopeCharts.ticks(Math.max(1, ...ys), 4, opts.binary), ymax = yt[yt.length - 1];
    const X = (/** @type {number} */ t) => L + ((t - Math.min(0, x0)) / Math.max(1e-9, x1 - Math.min(0, x0))) * (W - L - 10);
    const Y = (/** @type {number} */ v) => H - B - (v / ymax) * (H - B - T);
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

  return { stackedBars, hbars, lineChart };
})();
