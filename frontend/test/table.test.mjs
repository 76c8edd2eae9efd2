// The table's data shaping: filter by the text columns, sort by one column.
import { test } from "node:test";
import assert from "node:assert/strict";
import { page } from "./page.mjs";

const { visible } = page().TorchscopeTable;
const cols = [{ key: "name", label: "name" }, { key: "kind", label: "kind" }, { key: "total_us", label: "total", num: true }];
const rows = [
  { name: "aten::mm", kind: "cpu_op", total_us: 30 },
  { name: "aten::addmm", kind: "cpu_op", total_us: 120 },
  { name: "## forward ##", kind: "user_annotation", total_us: null },
  { name: "Memcpy HtoD", kind: "memcpy", total_us: 7.5 },
];
// plain arrays of this realm (the modules run in their own context, as in the page)
const names = (r) => JSON.parse(JSON.stringify(r.map((x) => x.name)));

test("the filter matches the text columns, any case, never the numbers", () => {
  assert.deepEqual(names(visible(rows, cols, "mm", null, true)), ["aten::mm", "aten::addmm"]);
  assert.deepEqual(names(visible(rows, cols, "user_annotation", null, true)), ["## forward ##"]);
  assert.deepEqual(names(visible(rows, cols, "120", null, true)), []);
  assert.deepEqual(names(visible(rows, cols, "memcpy htod", null, true)), ["Memcpy HtoD"]);
  assert.deepEqual(names(visible(rows, cols, "Memcpy", null, true)), []); // the page lower-cases what the user types
});

test("numbers sort as numbers, a missing one last when descending", () => {
  assert.deepEqual(names(visible(rows, cols, "", "total_us", true)), ["aten::addmm", "aten::mm", "Memcpy HtoD", "## forward ##"]);
  assert.deepEqual(names(visible(rows, cols, "", "total_us", false)), ["## forward ##", "Memcpy HtoD", "aten::mm", "aten::addmm"]);
});

test("text sorts as text; no sort key keeps the report's order and the rows themselves", () => {
  assert.deepEqual(names(visible(rows, cols, "", "name", false)), ["## forward ##", "aten::addmm", "aten::mm", "Memcpy HtoD"]);
  assert.equal(visible(rows, cols, "", null, true), rows);
  assert.deepEqual(names(rows), ["aten::mm", "aten::addmm", "## forward ##", "Memcpy HtoD"]); // never sorted in place
});
