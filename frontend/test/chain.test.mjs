// The operators chain (chain.js) on reports of real traces that tests/render/test_js.py writes
// (TORCHSCOPE_REPORTS, paths joined by the platform's delimiter), and on a hand-made case.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { delimiter } from "node:path";
import { page } from "./page.mjs";

const C = page().TorchscopeChain;
// plain values of this realm (the modules run in their own context, as in the page)
const plain = (x) => JSON.parse(JSON.stringify(x));
const reports = (process.env.TORCHSCOPE_REPORTS || "").split(delimiter).filter(Boolean)
  .map((p) => JSON.parse(readFileSync(p, "utf8")));

test("each shape row's kernels add up to its device total, to the nanosecond", (t) => {
  if (!reports.length) return t.skip("TORCHSCOPE_REPORTS unset: tests/render/test_js.py writes real reports");
  let rows = 0;
  for (const r of reports) {
    for (const o of r.operators_by_shape) {
      const ks = C.kernels(r, o.name, o.input_dims);
      assert.equal(C.sumUs(ks, "total_us"), o.device_total_us, `${o.name} ${o.input_dims}`);
      assert.equal(C.sumUs(ks, "self_total_us"), o.device_self_us, `${o.name} ${o.input_dims}`);
      rows += ks.length ? 1 : 0;
    }
  }
  assert.ok(rows > 20);
});

test("an op's shapes, then a shape's stacks and kernels, are exactly its rows", (t) => {
  if (!reports.length) return t.skip("TORCHSCOPE_REPORTS unset");
  for (const r of reports) {
    for (const op of new Set(r.operators_by_shape.map((o) => o.name))) {
      const shapes = C.shapes(r, op);
      assert.ok(shapes.length && shapes.every((o) => o.name === op));
      for (const o of shapes) {
        assert.ok(C.stacks(r, op, o.input_dims).every((s) => s.name === op && s.input_dims === o.input_dims));
        assert.ok(C.kernels(r, op, o.input_dims).every((k) => k.op_name === op && k.input_dims === o.input_dims));
      }
    }
  }
});

test("a kernel's launchers are the report's kernel_launchers rows of that kernel, adding up to it", (t) => {
  if (!reports.length) return t.skip("TORCHSCOPE_REPORTS unset");
  for (const r of reports) {
    for (const k of r.kernels) {
      const ls = C.launchers(r, k.name);
      assert.equal(ls.reduce((a, x) => a + x.count, 0), k.count, k.name);
      assert.equal(C.sumUs(ls, "total_us"), k.total_us, k.name);
    }
  }
});

test("launchers and kernels pick their own rows", () => {
  const r = {
    kernel_launchers: [
      { name: "sgemm", op_name: "aten::mm", count: 2, total_us: 50, ops: 1 },
      { name: "other", op_name: "aten::mm", count: 1, total_us: 5, ops: 1 },
    ],
    kernels_by_op: [
      { op_name: "aten::mm", input_dims: null, name: "sgemm", count: 2, total_us: 50, self_count: 2, self_total_us: 50 },
      { op_name: "aten::mm", input_dims: null, name: "(other kernels)", count: 9, total_us: 5, self_count: 9, self_total_us: 5 },
    ],
  };
  assert.deepEqual(plain(C.launchers(r, "sgemm")), [r.kernel_launchers[0]]);
  assert.deepEqual(plain(C.launchers(r, "nothing")), []);
  // null and undefined shapes are the same shape (a report row without recorded shapes)
  assert.equal(C.kernels(r, "aten::mm", undefined).length, 2);
});

test("an op's shape rows are its whole set; a list with a remainder says so and never opens by itself", (t) => {
  if (!reports.length) return t.skip("TORCHSCOPE_REPORTS unset");
  let cut = 0;
  for (const r of reports) {
    for (const op of r.operators) {
      const rows = C.shapes(r, op.name);
      assert.equal(rows.reduce((a, x) => a + x.calls, 0), op.calls, op.name);
      const other = rows.some((x) => x.input_dims === C.OTHER_SHAPES);
      assert.equal(C.shapeCoverage(rows, op) !== null, other, op.name);
      if (C.opensAtOnce(rows, op)) assert.ok(rows.length === 1 && !other, op.name);
      cut += other ? 1 : 0;
    }
  }
  assert.ok(cut > 0);
});

test("shape coverage, opening and hints on hand-made rows", () => {
  const rows = [
    { name: "a", input_dims: "[[1]]", calls: 3, device_total_us: 0, device_self_us: 0, shapes: 1 },
    { name: "a", input_dims: "(other shapes)", calls: 1200, device_total_us: 0, device_self_us: 0, shapes: 5 },
  ];
  assert.equal(C.shapeCoverage(rows, { calls: 1203 }), "the top 1 of 6 input shapes: 3 of 1,203 calls; (other shapes) holds the other 5");
  assert.equal(C.shapeCoverage(rows.slice(0, 1), { calls: 5 }), "3 of 5 calls: the report keeps only these rows");
  assert.equal(C.opensAtOnce(rows.slice(0, 1), { calls: 5 }), false);
  assert.equal(C.opensAtOnce(rows.slice(0, 1), { calls: 3 }), true);
  assert.equal(C.opensAtOnce(rows.slice(1), { calls: 1200 }), false);
  assert.equal(C.noShapes({ record_shapes: true }, "user_annotation"), "(none: an annotation has no inputs)");
  assert.equal(C.noShapes({ record_shapes: false }, "cpu_op"), "(not recorded: profile with record_shapes=True)");
  assert.equal(C.noShapes({ record_shapes: true }, "cpu_op"), "(none: no tensor inputs recorded)");
  assert.match(C.noStacks({ with_stack: false }, "cpu_op"), /with_stack=True/);
  assert.doesNotMatch(C.noStacks({ with_stack: true }, "cpu_op"), /with_stack/);
});
