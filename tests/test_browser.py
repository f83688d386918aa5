"""The reader's path, in a real browser: JupyterLab opens chapter 00, runs all cells, shows the plot.

JupyterLab is served on 127.0.0.1 with a token from a temporary folder holding a copy of the chapter
with its outputs cleared (so every output the test finds was produced now, and the repository's
copy is never autosaved). Headless Debian chromium is driven by Playwright (no browser download).
The screenshot lands in build/screenshots/. The server is shut down through its API (which stops
its kernel), then anything left is killed, and the test fails if a process survives.

Needs /usr/bin/chromium (or $CHROMIUM): `make test` installs it with apt-get where apt-get exists
and then sets COURSE_REQUIRE_BROWSER=1, so a missing browser fails instead of skipping.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nboutputs import png_outputs

from course_utils.subprocesses import descendants, free_port

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "00_setup_and_hardware.ipynb"
KNOWN_OUTPUT = "every rank is its own process, and the all-reduce summed over all of them"
SCREENSHOT = ROOT / "build" / "screenshots" / "00_setup_and_hardware.png"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run"]
RUN_TIMEOUT_S = 300

# JavaScript run in the page; `jupyterapp` is exposed by --LabApp.expose_app_in_browser
NOTEBOOK = "window.jupyterapp?.shell.currentWidget"
KERNEL_IDLE = f"{NOTEBOOK}?.sessionContext?.session?.kernel?.status === 'idle'"
CELLS = f"{NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
ALL_RUN = f"{KERNEL_IDLE} && {CELLS}.every(c => c.model.executionCount !== null)"
OUTPUTS = f"{CELLS}.flatMap(c => Array.from({{length: c.model.outputs.length}}, (_, i) => c.model.outputs.get(i)))"
IMAGES = f"{OUTPUTS}.filter(o => 'image/png' in o.data).length"
SHOW_FIRST_PLOT = f"""async () => {{
  const notebook = {NOTEBOOK}.content;
  const index = notebook.widgets.findIndex(c => c.model.type === 'code' &&
      Array.from({{length: c.model.outputs.length}}, (_, i) => c.model.outputs.get(i))
        .some(o => 'image/png' in o.data));
  notebook.activeCellIndex = index;
  await notebook.scrollToItem(index, 'center');
}}"""
ERRORS = f"{OUTPUTS}.filter(o => o.type === 'error').map(o => o.toJSON().ename + ': ' + o.toJSON().evalue)"


def wait_for_server(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer {url} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def stop_server(server: subprocess.Popen, base: str, token: str) -> None:
    """Shut the server down via its API (kernels included), then kill whatever is left."""
    below = set(descendants(server.pid))  # the kernel runs in its own session: remember it now
    try:
        request = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(request, timeout=10).close()
        server.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for pid in [server.pid, *below]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.wait(timeout=10)


@pytest.fixture
def chromium() -> str:
    if shutil.which(CHROMIUM) is None:
        message = f"no chromium at {CHROMIUM}: `sudo apt-get install chromium`, or set CHROMIUM=/path/to/it"
        if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


def test_jupyterlab_runs_chapter_00_in_chromium(tmp_path, chromium):
    from playwright.sync_api import sync_playwright

    # the chapter without outputs, in a folder of its own
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.read(ROOT / "notebooks" / CHAPTER, as_version=4)
    figures = png_outputs(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, tmp_path / "notebooks" / CHAPTER)
    # JupyterLab's settings, workspaces and runtime files stay in tmp_path; no news pop-up
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {**os.environ, "COURSE_PROFILE": "cpu", "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}

    port, token = free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={tmp_path}", "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines run as root
    with log.open("w") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                  start_new_session=True)
    try:
        wait_for_server(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(f"{base}/lab/tree/notebooks/{CHAPTER}?token={token}")
                page.wait_for_function(KERNEL_IDLE, timeout=120_000)
                # its kernel was started by the course's provisioner (tests/conftest.py): Unix sockets
                (connection,) = (tmp_path / "runtime").glob("kernel-*.json")
                assert json.loads(connection.read_text())["transport"] == "ipc"
                page.evaluate("window.jupyterapp.commands.execute('runmenu:run-all')")
                page.wait_for_function(ALL_RUN, timeout=RUN_TIMEOUT_S * 1000, polling=500)

                errors = page.evaluate(ERRORS)
                assert not errors, f"cells raised in the browser: {errors}"
                page.get_by_text(KNOWN_OUTPUT).first.wait_for(timeout=10_000)
                assert page.evaluate(IMAGES) == figures >= 1, "the notebook should make its figure(s) again"

                # the (first) figure in the middle of the screen, the file browser closed
                page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
                page.evaluate(SHOW_FIRST_PLOT)
                plot = page.locator(".jp-OutputArea-output img").first
                plot.wait_for(state="visible", timeout=10_000)
                plot.evaluate("img => img.scrollIntoView({block: 'center'})")
                assert plot.evaluate("img => img.naturalWidth") > 100  # a decoded PNG, not a broken image
                box, view = plot.bounding_box(), page.viewport_size
                assert 0 <= box["y"] and box["y"] + box["height"] <= view["height"], "plot not on screen"
                page.wait_for_timeout(500)
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT))
            finally:
                browser.close()
    finally:
        stop_server(server, base, token)
    time.sleep(0.5)
    left = {pid: cmd for pid, cmd in descendants().items() if str(tmp_path) in cmd or "chromium" in cmd}
    assert not left, f"still running after the test: {left}"
    assert SCREENSHOT.stat().st_size > 10_000
