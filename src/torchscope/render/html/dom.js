// @ts-check
// Building blocks of the page: elements and SVG nodes whose text is always textContent, so a
// string from a trace can never become markup. The page inlines this file before app.js; it
// defines one global, TorchscopeDom.

const TorchscopeDom = (() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#3b5bdb", "#f08c00", "#2f9e44", "#e03131", "#7048e8", "#1098ad", "#d6336c", "#868e96", "#5c940d", "#ae3ec9"];
  /** @typedef {Node | string | number | boolean | null | undefined} Kid */

  /** An element: props become attributes (on* listeners, `text` its textContent); kids are
   * nodes or text, never markup.
   * @param {string} tag @param {Record<string, any> | null} [props] @param {...(Kid | Kid[])} kids
   * @returns {HTMLElement} */
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
  /** An SVG element with attributes and, optionally, text.
   * @param {string} tag @param {Record<string, string | number>} [attrs] @param {string | number} [text]
   * @returns {SVGElement} */
  function s(tag, attrs, text) {
    const el = /** @type {SVGElement} */ (document.createElementNS(SVGNS, tag));
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = String(text);
    return el;
  }
  /** @param {string} k @param {Kid} v */
  function card(k, v) { return h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v)); }
  /** @param {string} msg */
  function empty(msg) { return h("div", { class: "empty" }, msg); }
  /** @param {string[]} names */
  function legend(names) {
    return h("div", { class: "legend" }, names.map((n, i) => h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), n)));
  }

  return { SVGNS, COLORS, h, s, card, empty, legend };
})();
