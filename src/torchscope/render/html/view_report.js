// @ts-check
// Report: every section of report --json as headed tables with units.
// The page inlines this file before app.js; it defines one global, viewReport.

const viewReport = (() => {
  const { pretty } = TorchscopeFormat;
  const { h, empty } = TorchscopeDom;
  const { state, run, report, rep, generic } = TorchscopePage;
  const TITLES = { meta: "The trace", steps: "Steps", breakdown_us: "Step time by category (average per step)",
    host_breakdown_us: "Host time by category (average per step)", devices: "Devices", comm_overlap: "Computation and communication (average per step)",
    operators: "Operators", operators_by_shape: "Operators by input shape", call_stacks: "Python call stacks", flops: "FLOPs",
    kernels: "Kernels", kernels_by_op: "Kernels by op and input shape", kernel_types: "Kernel types", temporal_breakdown: "Time on the device",
    comm_comp_overlap: "Communication hidden behind computation", launch_stats: "Launches", idle_time: "Idle time per stream",
    queue_length: "Queue length per stream", memory: "Memory", modules: "Modules", module_ops: "Ops by module", recommendations: "Recommendations",
    distributed: "Distributed", warnings: "Warnings", steps_count: "Steps" };
  const SKIP = ["units", "report_version", "kind", "ranks", "source"];
  function sections(/** @type {Obj} */ r) {
    return Object.entries(r).filter(([k]) => !SKIP.includes(k)).flatMap(([k, v]) =>
      [h("h3", {}, /** @type {Record<string, string>} */ (TITLES)[k] || pretty(k)), h("div", { class: "section", "data-section": k }, generic(v, k))]);
  }
  function viewReport() {
    const R = report();
    if (!R) return [h("h2", {}, "Full analysis report"), empty("The analysis report is not available for this trace.")];
    /** @type {Node[]} */
    const out = [h("h2", {}, "Full analysis report"),
      h("div", { class: "muted" }, `Every section of \`torchscope report --json\` (version ${R.report_version}), with units; times are since the trace's first event. Source: ${R.source}`)];
    if (R.kind === "job") {
      // each run's sections (its steps, cycles, collectives, straggler, ranks): the runs were one
      // table of their scalar columns, and the rest of --json was on no tab but Job
      const { runs, ...rest } = R;
      out.push(...sections(rest));
      for (const one of runs || []) out.push(h("h2", {}, `Run ${one.run}`), ...sections(one));
      return out;
    }
    // a torchscope run's members are its cycles (step_N), a folder's its ranks
    if (R.kind === "traceset") out.push(...sections(R), h("h2", {}, `${state.payload.run ? "Cycle" : "Rank"} ${run().name}`));
    out.push(...sections(rep()));
    return out;
  }

  return viewReport;
})();
