"""The dashboard's tests: a `pyrmq standalone` process, a `pyrmq dashboard`
process pointed at it (port 0, the URL read from its first line), and
Debian's headless chromium driven by Playwright (never a browser Playwright
downloads). Skipped, saying why, when chromium or the web stack is absent.

Screenshots go to each test's tmp_path; with PYRMQ_DASHBOARD_SCREENSHOTS=1
the main pages' are written to docs/dashboard/ as well (the committed ones)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests.integration.conftest import arun  # noqa: F401  (fixture re-export)

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "dashboard"
#: seconds the dashboard may take from exec to printing its URL (a busy machine)
START_TIMEOUT = 60.0
#: Playwright's timeout of each navigation / wait, ms: generous, the machine is shared
PAGE_TIMEOUT_MS = 60_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
#: every delay level 1 s, so a retried message comes back quickly
SHORT_DELAY_LEVELS = " ".join(["1s"] * 18)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def _skip_reason() -> str | None:
    missing = [
        m
        for m in ("playwright", "starlette", "jinja2", "uvicorn")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        return f"needs {', '.join(missing)} (pip install -e '.[test]')"
    if chromium_path() is None:
        return "needs Debian's chromium (apt-get install chromium; .ci/run installs it)"
    return None


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    if reason is None:
        return
    here = pathlib.Path(__file__).parent
    for item in items:
        in_here = here in pathlib.Path(str(item.fspath)).parents
        if in_here and "dashboard" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    settings = {**SMALL_STORE, "messageDelayLevel": SHORT_DELAY_LEVELS}
    proc = StandaloneProcess(tmp_path_factory.mktemp("standalone"), settings)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class DashboardProcess:
    """`python -m pyrmq dashboard -n NS --port 0`; `url` once it listens."""

    def __init__(self, namesrv: str, workdir: pathlib.Path) -> None:
        self.err_path = workdir / "dashboard.err"
        cmd = [sys.executable, "-m", "pyrmq", "dashboard", "-n", namesrv]
        cmd += ["--port", "0", "--timeout", "10"]
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        self.url = self._read_url()

    def _read_url(self) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        try:
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    self.stop()
                    raise AssertionError(
                        f"the dashboard printed no URL in {START_TIMEOUT:.0f} s: "
                        + self.err_path.read_text(errors="replace")[-2000:]
                    )
                if sel.select(min(left, 0.5)):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        continue
                    line += chunk
        finally:
            sel.close()
        text = line.decode().split("\n", 1)[0]
        assert text.startswith("pyrmq dashboard: http://"), text
        return text.split()[2].rstrip("/")

    def stop(self) -> None:
        """SIGTERM to the process started here (by its PID), SIGKILL after 20 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def errors(self) -> str:
        return self.err_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def dashboard(
    standalone: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DashboardProcess]:
    d = DashboardProcess(standalone.namesrv, tmp_path_factory.mktemp("dashboard"))
    try:
        yield d
    finally:
        d.stop()
    # no request may have failed unexpectedly (those log a traceback)
    assert "Traceback" not in d.errors(), d.errors()[-4000:]


@contextlib.asynccontextmanager
async def browser_page(errors: list[str]) -> AsyncIterator[Any]:
    """A page of a fresh headless chromium; console errors and uncaught
    exceptions of the page are appended to `errors`."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS, timeout=PAGE_TIMEOUT_MS
        )
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 720})
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            page.on(
                "console",
                lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            yield page
        finally:
            await browser.close()


def screenshot_paths(tmp_path: pathlib.Path, name: str) -> list[pathlib.Path]:
    paths = [tmp_path / f"{name}.png"]
    if os.environ.get("PYRMQ_DASHBOARD_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        paths.append(DOCS / f"{name}.png")
    return paths
