// @ts-check
// Kernels: the table and the ops that launched a kernel (chain.js).
// The page inlines this file before app.js; it defines one global, viewKernels.

const viewKernels = (() => {
  const { fmtUs, fmtCount } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { table } = TorchscopeTable;
  const { rep, col, nameCol, reportPart, drillTable } = TorchscopePage;
  const { hbars } = TorchscopePlots;
  const C = TorchscopeChain;
  function viewKernels() {
    const ks = rep().kernels || [];
    if (!ks.length) return [h("h2", {}, "Kernels"), empty("No kernels in this trace (CPU-only run)."), ...reportPart("Time on the device", "temporal_breakdown")];
    const drill = h("div", { class: "drill", "data-testid": "kernel-drill" }, h("span", { class: "muted" }, "Click a kernel for the ops that launched it."));
    return [h("h2", {}, "Kernels"),
      hbars(ks.slice(0, 12).map((/** @type {Obj} */ k) => ({ k: k.name, v: k.total_us })), fmtUs, "kernels-chart"),
      table([nameCol("name", "name"), col("count", "calls"), col("total_us", "total"), col("share_pct", "share"), col("mean_us", "mean"),
        col("min_us", "min"), col("max_us", "max"), col("occupancy_pct", "est. occupancy"), col("blocks_per_sm", "blocks per SM"),
        { key: "tensor_core", label: "Tensor Cores", fmt: (v) => (v ? "yes" : "no") }], ks, { id: "kernels-table", onRow: (k) => {
        const ls = C.launchers(rep(), k.name);
        drill.replaceChildren(h("h3", {}, k.name),
          ...drillTable("Launched by (the innermost op)", ls, [nameCol("op_name", "launching op"), col("count", "calls"), col("total_us", "total"),
            // how many ops the "(other ops)" row stands for: only where there is one
            ...(ls.some((x) => x.op_name === C.OTHER_OPS) ? [col("ops", "ops")] : [])], "drill-launchers", "no launches recorded"),
          ...(ls.length ? [h("div", { class: "muted", "data-testid": "drill-launchers-sum" }, `sum ${fmtCount(ls.reduce((a, x) => a + x.count, 0))} calls, ${fmtUs(C.sumUs(ls, "total_us"))}` +
            ` = the kernel's ${fmtCount(k.count)} calls, ${fmtUs(k.total_us)}` + (ls.some((x) => x.op_name === C.OTHER_OPS) ? ` (the top ops, then ${C.OTHER_OPS})` : ""))] : []));
      } }),
      drill,
      ...reportPart("Launching ops of each kernel", "kernel_launchers"), ...reportPart("Kernels by op and input shape (with the ops each calls)", "kernels_by_op"), ...reportPart("Kernel types", "kernel_types"),
      ...reportPart("Time on the device", "temporal_breakdown"), ...reportPart("Launches", "launch_stats"),
      ...reportPart("Idle time per stream", "idle_time"), ...reportPart("Queue length per stream", "queue_length")];
  }

  return viewKernels;
})();
