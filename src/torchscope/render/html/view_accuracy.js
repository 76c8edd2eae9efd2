// @ts-check
// Accuracy: the first divergence, per op and per module.
// The page inlines this file before app.js; it defines one global, viewAccuracy.

const viewAccuracy = (() => {
  const { fmtInt } = TorchscopeFormat;
  const { h, card, empty } = TorchscopeDom;
  const { generic, accuracy } = TorchscopePage;
  function viewAccuracy() {
    const a = accuracy();
    if (!a) return [h("h2", {}, "Accuracy"), empty("No accuracy comparison in this report.")];
    /** @type {Node[]} */
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

  return viewAccuracy;
})();
