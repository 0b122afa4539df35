"""``inspect view`` serves the folder ``carryon export --format inspect`` wrote, and headless
Chromium opens one sample and finds a turn's text in it (tests/support/browser.py)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tasks.bench import load_spec
from tasks.export.inspect_logs import log_name, write_logs
from tests.support import export_home
from tests.support.browser import _open, chromium  # noqa: F401 (the fixture)

TURN = "Check the hologram and the feel of the paper."  # e1's last answer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def inspect_view(tmp_path):
    """``inspect view`` over an export of the hand-built warehouse: (port, log file name)."""
    wh = export_home.build(tmp_path / "w.duckdb")
    write_logs(wh, load_spec("opensafeintent"), tmp_path / "logs")
    port = _free_port()
    exe = shutil.which("inspect", path=str(Path(sys.executable).parent)) or "inspect"
    proc = subprocess.Popen([exe, "view", "--log-dir", str(tmp_path / "logs"), "--host",
                             "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("inspect view did not start")
        time.sleep(0.3)
    yield port, log_name("opensafeintent", "target-a")
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.mark.browser
def test_inspect_view_opens_a_sample_with_its_turns(inspect_view, chromium):  # noqa: F811
    port, name = inspect_view

    async def check(page):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if await page.eval(f"document.body.innerText.includes({TURN!r})"):
                return True
            await asyncio.sleep(0.5)
        return await page.eval("document.body.innerText.slice(0, 2000)")

    url = f"http://127.0.0.1:{port}/#/logs/{name}/samples/sample/e1/1"
    found = asyncio.run(_open(chromium, url, check))
    assert found is True, f"the sample page does not show the turn; it shows: {found!r}"
