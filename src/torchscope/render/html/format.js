// @ts-check
// Numbers as text by the unit the report declares (report.units): the twins of render/units.py,
// so the page and the terminal print the same text (tests/render/test_js.py checks they agree).
// The page inlines this file before app.js; it defines one global, TorchscopeFormat.

const TorchscopeFormat = (() => {
  const DASH = "–";
  /** @param {unknown} v @returns {v is null | undefined} */
  const none = (v) => v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
  /** @param {number | string} n */
  const group = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  /** @param {number} num @param {number} den */
  const halfUp = (num, den) => Math.floor((2 * num + den) / (2 * den));
  /** q / 10^d with d decimals, thousands grouped. @param {number} q @param {number} d */
  function fixed(q, d) {
    if (!d) return group(q);
    const p = 10 ** d, whole = Math.floor(q / p), frac = q - whole * p;
    return group(whole) + "." + String(frac).padStart(d, "0");
  }
  /** @param {number | null | undefined} us @returns {string} */
  function fmtUs(us) {
    if (none(us)) return DASH;
    const ns = Math.round(us * 1000), sign = ns < 0 ? "-" : "", a = Math.abs(ns);
    if (a >= 1e9) return sign + fixed(halfUp(a, 1e6), 3) + " s";
    if (a >= 1e6) return sign + fixed(halfUp(a, 1000), 3) + " ms";
    if (a >= 1000) return sign + fixed(halfUp(a, 100), 1) + " µs";
    return sign + a + " ns";
  }
  /** @param {number | null | undefined} ns */
  const fmtNs = (ns) => (none(ns) ? DASH : fmtUs(ns / 1000));
  /** @param {number | null | undefined} ts @param {number} [start] */
  const fmtOffset = (ts, start) => (none(ts) ? DASH : "+" + fmtUs(ts - (start || 0)));
  /** @param {number | null | undefined} n */
  function fmtBytes(n) {
    if (none(n)) return DASH;
    const u = ["B", "KiB", "MiB", "GiB", "TiB"], a = Math.abs(Math.trunc(n)), sign = n < 0 ? "-" : "";
    let i = 0;
    while (a >= 1024 ** (i + 1) && i < u.length - 1) i++;
    return i === 0 ? `${sign}${a} B` : `${sign}${fixed(halfUp(a * 100, 1024 ** i), 2)} ${u[i]}`;
  }
  /** @param {number} v @param {number} d */
  function decimals(v, d) {
    const q = Math.floor(Math.abs(v) * 10 ** d + 0.5);
    return (v < 0 && q ? "-" : "") + fixed(q, d);
  }
  /** @param {number | null | undefined} p */
  const fmtPct = (p) => (none(p) ? DASH : decimals(p, 1) + " %");
  /** @param {number | null | undefined} v */
  const fmtCount = (v) => (none(v) ? DASH : Number.isInteger(v) ? group(v) : decimals(v, 2));
  const fmtInt = fmtCount;
  /** @param {number | null | undefined} v @param {string} unit */
  function fmtSi(v, unit) {
    if (none(v)) return DASH;
    const p = ["", "K", "M", "G", "T", "P", "E"];
    let i = 0, a = Math.abs(v);
    while (a >= 1000 && i < p.length - 1) { a /= 1000; i++; }
    return `${decimals(v >= 0 ? a : -a, 2)} ${p[i]}${unit}`;
  }
  // a value in the unit the report names; start: the trace's first event (timestamps)
  /** @param {unknown} v @param {string | undefined} [unit] @param {number} [start] @returns {string} */
  function fmt(v, unit, start) {
    if (none(v)) return DASH;
    if (typeof v !== "number") return String(v);
    switch (unit) {
      case "us": return fmtUs(v);
      case "ns": return fmtUs(v / 1000);
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
  // words a report key abbreviates, and keys that are only a unit, as a reader would say them
  /** @type {Record<string, string>} */
  const WORDS = { dur: "duration", ts: "time", avg: "average", pct: "share", us: "time", bytes: "size", num: "number" };
  // a report key as a column or section label: words, without the unit suffix its value shows
  /** @param {string} k */
  const pretty = (k) => {
    const words = String(k).replace(/_(us|pct|bytes)$/, "").split("_");
    return words.map((w) => WORDS[w] ?? w).join(" ");
  };

  return { DASH, none, group, fixed, halfUp, fmtUs, fmtNs, fmtOffset, fmtBytes, decimals, fmtPct, fmtCount, fmtInt, fmtSi, fmt, pretty };
})();
