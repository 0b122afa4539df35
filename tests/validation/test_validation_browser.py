"""The annotation page in real headless Chromium: it opens with no console errors (from
file://, and over loopback HTTP for the reload), shows one conversation at a time, clicks label
user turns, the labels survive a reload (localStorage autosave), progress counts them, hostile model text stays text, and the export
(textarea and data: download link) is what `carryon validate import` accepts."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import os
import threading
import urllib.parse
from pathlib import Path

import pytest

from tasks.config import load_config
from tasks.validation.annotations import import_files
from tasks.validation.page import write_pages
from tasks.validation.sample import draw_sample
from tests.support.report import build_synthetic
from tests.support.browser import CHROMIUM, Page, chromium  # noqa: F401  (fixture)
from tests.support.browser import _open as _session

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs /usr/bin/chromium")]


@contextlib.contextmanager
def _served(folder: Path):
    """``folder`` over HTTP on a loopback port, for the length of the block: its base URL."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines in the test output
        pass


async def _reload(page: Page):
    page.events = [e for e in page.events if e.get("method") != "Page.loadEventFired"]
    await page.send("Page.reload")
    await page.wait_event("Page.loadEventFired")


def test_naturalness_page_in_chromium(chromium, write_config, tmp_path):  # noqa: F811
    cfg = load_config(write_config())
    wh, _ = build_synthetic(cfg.home_path, n_targets=2, n_queries=3)
    res = draw_sample(wh, "naturalness", seed=0)
    # A conversation with the hostile answer, to check it renders as text.
    hostile = wh.query("SELECT conversation_id FROM turns WHERE content LIKE '%__pwned%' LIMIT 1")[0]["conversation_id"]
    wh.write("validation_units", [{"sample_id": res["sample_id"], "unit_id": hostile, "conversation_id": hostile,
                                   "stratum": "x"}])
    wh.write("validation_assignments", [{"sample_id": res["sample_id"], "annotator": "a01", "unit_id": hostile,
                                         "shown_order": -1}])
    html = next(p for p in write_pages(wh, res["sample_id"], tmp_path / "pages") if p.name.endswith("-a01.html"))

    async def steps(page: Page):
        out = {}
        out["first_text"] = await page.eval("document.getElementById('unit').innerText")
        out["n_convs"] = await page.eval("document.querySelectorAll('#unit .conv').length")
        out["pwned"] = await page.eval("window.__pwned === 1")
        n_user = await page.eval("document.querySelectorAll('#unit .turn.user').length")
        out["n_user"] = n_user
        # Label the first user turn "very natural" (4) and the second "very unnatural" (1).
        await page.eval("""(() => {
            const asks = Array.from(document.querySelectorAll('#unit .turn.user .ask'));
            asks[0].querySelector('input[value="4"]').click();
            asks[1].querySelector('input[value="1"]').click();
        })()""")
        out["progress"] = await page.eval("document.getElementById('progress').textContent")
        # Next conversation, label one turn there, then reload.
        await page.eval("document.getElementById('next').click()")
        await page.eval("document.querySelector('#unit .turn.user .ask input[value=\"3\"]').click()")
        await _reload(page)
        out["after_reload_progress"] = await page.eval("document.getElementById('progress').textContent")
        out["still_second"] = await page.eval(
            "document.querySelector('#unit .turn.user .ask input[value=\"3\"]').checked")
        await page.eval("document.getElementById('prev').click()")
        out["checked_first"] = await page.eval("""Array.from(document.querySelectorAll('#unit .turn.user .ask'))
            .slice(0, 2).map(a => (a.querySelector('input:checked') || {}).value || null)""")
        out["export"] = await page.eval("document.getElementById('export').value")
        out["href"] = await page.eval("document.getElementById('download').getAttribute('href')")
        out["download"] = await page.eval("document.getElementById('download').download")
        out["errors"] = page.errors()
        return out

    # Over loopback HTTP, not file://: what this test checks is the page's own save and
    # restore. Headless Chromium sometimes shows a reloaded file:// document an empty
    # localStorage (measured here: 1 reload in 20 to 35, the stored labels present before it,
    # even a second after the last write; over HTTP 0 in 60), which failed CI once. The page
    # uses localStorage the same way under either scheme; the other browser test opens its
    # pages as files.
    with _served(html.parent) as base:
        out = asyncio.run(_session(chromium, f"{base}/{html.name}", steps))
    assert out["errors"] == []
    assert out["n_convs"] == 1 and out["n_user"] >= 2  # one conversation at a time
    assert "<script>window.__pwned=1</script>" in out["first_text"] and not out["pwned"]
    assert "very natural" in out["first_text"]
    assert "2 of" in out["progress"] and "Item 1 of" in out["progress"]
    assert "3 of" in out["after_reload_progress"] and "Item 2 of" in out["after_reload_progress"]
    assert out["still_second"] is True and out["checked_first"] == ["4", "1"]
    exp = json.loads(out["export"])
    assert out["href"].startswith("data:application/json")
    assert json.loads(urllib.parse.unquote(out["href"].split(",", 1)[1])) == exp
    assert out["download"] == f"annotations-{res['sample_id']}-a01.json"
    assert exp["annotator"] == "a01" and exp["kind"] == "naturalness" and len(exp["labels"]) == 3
    first = [lab for lab in exp["labels"] if lab["unit_id"] == hostile]
    assert sorted(lab["value"] for lab in first) == [1, 4]
    f = tmp_path / "a01.json"
    f.write_text(out["export"])
    assert import_files(wh, [f])[0]["labels"] == 3
    assert wh.count("validation_annotations") == 3


def test_benutil_and_safety_pages_in_chromium(chromium, write_config, tmp_path):  # noqa: F811
    cfg = load_config(write_config())
    wh, _ = build_synthetic(cfg.home_path, n_targets=2, n_queries=3)
    b = draw_sample(wh, "benutil", seed=0, pairs=2, n_annotators=1)
    s = draw_sample(wh, "safety", seed=0, per_score=1, n_annotators=1)
    bpage = write_pages(wh, b["sample_id"], tmp_path / "p")[0]
    spage = write_pages(wh, s["sample_id"], tmp_path / "p")[0]

    async def bsteps(page: Page):
        n_conv = await page.eval("document.querySelectorAll('#unit .conv').length")
        n_items = await page.eval("document.querySelectorAll('#unit .items li').length")
        await page.eval("document.querySelector('#unit .items li input[value=\"1\"]').click()")
        await page.eval("document.querySelectorAll('#unit .items li')[1].querySelector('input[value=\"0\"]').click()")
        return n_conv, n_items, await page.eval("document.getElementById('export').value"), page.errors()

    n_conv, n_items, exp, errors = asyncio.run(_session(chromium, bpage.resolve().as_uri(), bsteps))
    assert errors == [] and n_conv == 2 and n_items >= 10  # a pair, each with its checklist
    labs = json.loads(exp)["labels"]
    assert [(lab["position"], lab["value"]) for lab in labs] == [(-1, 1), (-1, 0)]

    async def ssteps(page: Page):
        target = await page.eval("document.querySelectorAll('#unit .turn.target').length")
        asks = await page.eval("document.querySelectorAll('#unit .ask').length")
        await page.eval("document.querySelector('#unit .turn.target input[value=\"5\"]').click()")
        return target, asks, await page.eval("document.getElementById('export').value"), page.errors()

    target, asks, exp, errors = asyncio.run(_session(chromium, spage.resolve().as_uri(), ssteps))
    assert errors == [] and target == 1 and asks == 1
    assert [lab["value"] for lab in json.loads(exp)["labels"]] == [5]
    f = tmp_path / "s.json"
    f.write_text(exp)
    assert import_files(wh, [f])[0]["labels"] == 1
