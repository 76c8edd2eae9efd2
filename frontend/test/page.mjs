// Loads the dashboard's modules as the page does: the files __init__.py's VIEW_MODULES names,
// in its order, joined into one script and run in a fresh context (node:vm). app.js, the shell,
// is left out: it starts the page. Each module defines one global; `page()` returns them.
import { readFileSync } from "node:fs";
import vm from "node:vm";

const HTML = new URL("../../src/torchscope/render/html/", import.meta.url);

/** The module files in the page's order, read from VIEW_MODULES in render/html/__init__.py. */
export function modules() {
  const init = readFileSync(new URL("__init__.py", HTML), "utf8");
  const tuple = /VIEW_MODULES = \(([^)]*)\)/.exec(init);
  if (!tuple) throw new Error("VIEW_MODULES not found in render/html/__init__.py");
  return [...tuple[1].matchAll(/"([\w.]+\.js)"/g)].map((m) => m[1]);
}

/** Every module's global, defined as in the page (no DOM: the modules touch it only when drawing). */
export function page() {
  const files = modules();
  const source = files.map((f) => readFileSync(new URL(f, HTML), "utf8")).join("\n;\n");
  const globals = [...source.matchAll(/^const (\w+) = \(/gm)].map((m) => m[1]);
  return vm.runInContext(`${source}\n;({ ${globals.join(", ")} })`, vm.createContext({}));
}
