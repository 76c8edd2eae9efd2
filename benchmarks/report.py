"""Benchmark: the report of a large trace, against torch-tb-profiler's analysis of the same file.

Prints, for ``other_devices/mtia_training_large.json.gz`` (456k events) by default:
the time to load the trace, the time to build the report (analyses + dashboard payload + HTML)
and its ratio to the load (target < 3x), the HTML size (target < 10 MB), the time until
headless Chromium has rendered the Overview (target < 1 s), the timeline's time to its first
frame, the median frame while panning it fully zoomed out (>= 60 frames measured in the page with
requestAnimationFrame; target < 16 ms), the time to search it by name (target < 200 ms), and
torch-tb-profiler's parse + process + analyze of the same file as the peer. No thresholds are asserted.

    .venv/bin/python benchmarks/report.py [TRACE] [--no-peer] [--no-browser]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "traces" / "other_devices" / "mtia_training_large.json.gz"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ours(path: Path, html: Path) -> dict[str, float]:
    import torchscope
    from torchscope.render.html import render_html
    from torchscope.render.payload import build_payload

    t0 = time.perf_counter()
    trace = torchscope.load(path)
    t1 = time.perf_counter()
    payload = build_payload(trace)
    t2 = time.perf_counter()
    text = render_html(payload)
    html.write_text(text, encoding="utf-8")
    t3 = time.perf_counter()
    return {
        "events": float(trace.events.height),
        "memory_events": float(trace.memory.height),
        "flows": float(trace.flows.height),
        "load_s": t1 - t0,
        "payload_s": t2 - t1,
        "html_s": t3 - t2,
        "build_s": t3 - t1,
        "html_mb": html.stat().st_size / 1e6,
        "peak_rss_mb": _rss_mb(),
        "warnings": float(len(payload["warnings"])),
    }


def overview_in_chromium(html: Path, chromium: str) -> tuple[float, float]:
    """(ms from navigation start to the Overview's first render, wall ms from goto to it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        t0 = time.perf_counter()
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("#view[data-rendered=overview]", timeout=120_000)
        wall = (time.perf_counter() - t0) * 1000
        in_page = float(page.get_attribute("body", "data-first-render-ms") or "nan")
        browser.close()
    return in_page, wall


PAN_JS = """async (frames) => {
  const c = document.querySelector('[data-testid=timeline-canvas]');
  const ctl = TorchscopeTimeline.controllerOf(c);
  const [x0, x1] = ctl.range(), span = x1 - x0, work = [], gaps = [];
  let last = performance.now();
  for (let i = 0; i < frames; i++) {
    await new Promise((done) => requestAnimationFrame(() => {
      const t = performance.now();
      gaps.push(t - last); last = t;
      const d = span * 0.01 * Math.sin(i / 8);  // pan back and forth, fully zoomed out
      ctl.show(x0 + d, x1 + d);
      work.push(performance.now() - t);
      done(null);
    }));
  }
  const med = (a) => a.slice().sort((p, q) => p - q)[a.length >> 1];
  return { frames, drawMs: med(work), frameMs: med(gaps.slice(1)), drawn: Number(c.dataset.drawn) };
}"""


def timeline_in_chromium(html: Path, chromium: str, query: str) -> dict[str, float]:
    """The timeline tab: ms to its first frame, the median frame while panning, search ms."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # unthrottled frames: the rAF interval is then the frame's cost, not the 60 Hz refresh
        args = CHROMIUM_ARGS + ["--disable-gpu-vsync", "--disable-frame-rate-limit"]
        browser = p.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True).new_page()
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("#view[data-rendered=overview]", timeout=120_000)
        t0 = time.perf_counter()
        page.click("#tabs button[data-view=timeline]")
        page.wait_for_selector("[data-testid=timeline][data-ready]", timeout=120_000)
        ready = (time.perf_counter() - t0) * 1000
        pan = page.evaluate(PAN_JS, 90)
        t1 = time.perf_counter()
        page.fill("[data-testid=timeline-search]", query)
        page.press("[data-testid=timeline-search]", "Enter")
        found = page.wait_for_selector("[data-testid=timeline-search-count][data-count]")
        search_wall = (time.perf_counter() - t1) * 1000
        out = {
            "timeline_ms": ready,
            "frames": float(pan["frames"]),
            "draw_ms": float(pan["drawMs"]),
            "frame_ms": float(pan["frameMs"]),
            "rects": float(pan["drawn"]),
            "search_ms": float(found.get_attribute("data-ms") or "nan"),
            "search_wall_ms": search_wall,
            "matches": float(found.get_attribute("data-count") or "nan"),
        }
        browser.close()
    return out


def peer(path: Path) -> float:
    """torch-tb-profiler: parse + process + analyze (what its overview page runs)."""
    import logging

    from torch_tb_profiler.profiler.data import RunProfileData

    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        data = RunProfileData.parse("worker0", "span", str(path), cache)
        data.process()
        data.analyze()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--query", default="addmm", help="the timeline search to time")
    ap.add_argument("--chromium", default=os.environ.get("TORCHSCOPE_CHROMIUM", "/usr/bin/chromium"))
    args = ap.parse_args()
    path = Path(args.trace)
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        r = ours(path, html)
        print(
            f"trace               {path.name}: {int(r['events']):,} events, "
            f"{int(r['memory_events']):,} memory events, {int(r['flows']):,} flows"
        )
        print(f"load                {r['load_s']:.2f} s")
        print(
            f"build report        {r['build_s']:.2f} s  (analyses+payload {r['payload_s']:.2f} s, HTML {r['html_s']:.2f} s)"
        )
        print(f"build / load        {r['build_s'] / r['load_s']:.2f}x   (target < 3x)")
        print(f"HTML size           {r['html_mb']:.2f} MB   (target < 10 MB)")
        print(f"peak RSS            {r['peak_rss_mb']:.0f} MB")
        if r["warnings"]:
            print(f"payload warnings    {int(r['warnings'])}")
        if not args.no_browser:
            in_page, wall = overview_in_chromium(html, args.chromium)
            print(
                f"Overview rendered   {in_page / 1000:.2f} s after navigation ({wall / 1000:.2f} s wall from goto)   (target < 1 s)"
            )
            tl = timeline_in_chromium(html, args.chromium, args.query)
            print(
                f"timeline ready      {tl['timeline_ms']:.0f} ms after the tab's click (inflate, index, first frame)"
            )
            print(
                f"pan, zoomed out     median frame {tl['frame_ms']:.1f} ms over {int(tl['frames'])} frames "
                f"(draw {tl['draw_ms']:.1f} ms, {int(tl['rects']):,} rectangles)   (target < 16 ms)"
            )
            print(
                f"search '{args.query}'     {tl['search_ms']:.1f} ms in the page (count, jump, details), {tl['search_wall_ms']:.0f} ms wall "
                f"to the count ({int(tl['matches']):,} matches)   (target < 200 ms)"
            )
    if not args.no_peer:
        t = peer(path)
        ours_total = r["load_s"] + r["build_s"]
        print(f"torch-tb-profiler   parse+process+analyze {t:.2f} s")
        print(
            f"ours vs peer        load+build {ours_total:.2f} s = {t / ours_total:.1f}x faster than torch-tb-profiler"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
