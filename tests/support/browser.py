"""Headless Chromium over the DevTools protocol: the ``chromium`` fixture (the port of a
browser it starts, stopped after the test), ``Page`` (a minimal protocol client) and ``_open``
(navigate, wait for the load, run a check on the page). Used by every browser test."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

CHROMIUM = "/usr/bin/chromium"


class Page:
    """A minimal DevTools-protocol client on aiohttp's websocket."""

    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    async def send(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=30)).data)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def wait_event(self, method: str, timeout: float = 30):
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads((await self.ws.receive(timeout=deadline - time.monotonic())).data)
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(method)

    async def eval(self, expr: str):
        r = await self.send("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self) -> list:
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(p)
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"])
        return out


@pytest.fixture
def chromium(tmp_path):
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("chromium did not start (no DevToolsActivePort)")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    yield port
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(profile, ignore_errors=True)


async def _open(port: int, url: str, check):
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json(content_type=None)
        page_target = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(page_target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            for domain in ("Runtime", "Log", "Page"):
                await page.send(f"{domain}.enable")
            await page.send("Page.navigate", url=url)
            await page.wait_event("Page.loadEventFired")
            return await check(page)
