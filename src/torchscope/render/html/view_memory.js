// @ts-check
// Memory: peaks, the allocated/reserved curve with its peak marked, allocations by op, leaks.
// The page inlines this file before app.js; it defines one global, viewMemory.

const viewMemory = (() => {
  const { none, fmtBytes, fmt } = TorchscopeFormat;
  const { h, card, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { run, rep, START, col, nameCol, reportPart } = TorchscopePage;
  const { lineChart } = TorchscopePlots;
  function viewMemory() {
    const m = rep().memory || {}, peaks = m.peaks || [], curves = run().memory_curves || [];
    if (!peaks.length) return [h("h2", {}, "Memory"), empty("No memory events (record with profile_memory=True / torchscope run --memory).")];
    /** @type {Node[]} */
    const out = [h("h2", {}, "Memory"), h("div", { class: "cards", "data-testid": "memory-cards" }, peaks.map((/** @type {Obj} */ p) =>
      card(`${p.device} peak allocated`, `${fmtBytes(p.peak_allocated_bytes)} at ${fmt(p.peak_ts_us, "timestamp_us", START())}` + (p.peak_op ? ` in ${p.peak_op}` : ""))))];
    curves.forEach((/** @type {Obj} */ c) => {
      out.push(h("h3", {}, `${c.device}: allocated and reserved over time`));
      const p = peaks.find((/** @type {Obj} */ x) => x.device === c.device);
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

  return viewMemory;
})();
