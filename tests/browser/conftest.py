"""Browser-test fixtures: Debian Chromium through Playwright, a JupyterLab server and a Voilà server.

Follows /work/shared/BROWSER-TESTING.md: servers on 127.0.0.1 with a random token and their own
config/runtime/settings/workspace folders; the news toast switched off; each notebook is a copy of its
own under a workspace of its own (tabs and kernels are not shared between notebooks). Tests that read one page in
order share it through a module fixture (``test_lab.lab_ui``, ``test_voila.voila_ui``): a page load starts a kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("TCBENCH_CHROMIUM", "/usr/bin/chromium")
BIN = Path(sys.executable).parent
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


# -- Playwright: Debian's Chromium, never a downloaded browser ------------------------------------
@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}: run `apt-get install -y chromium` "
                    "(never `playwright install`), or point TCBENCH_CHROMIUM at it")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "headless": True, "args": CHROMIUM_FLAGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1500, "height": 1900}}


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# -- servers -----------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0, port_only: bool = False) -> None:
    """Wait until ``url`` answers 200 (or, with port_only, until its port accepts connections)."""
    port = int(url.split(":")[2].split("/")[0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if port_only:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"server not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _server_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
    env.setdefault("TCBENCH_DB", str(tmp / "tcbench.db"))
    return env


class Server:
    def __init__(self, url: str, token: str, root: Path, proc: subprocess.Popen):
        self.url, self.token, self.root, self.proc = url, token, root, proc

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        return json.loads(text) if text else {}

    def copy_notebook(self, name: str = "00_workbench.ipynb") -> str:
        """A copy under a unique name (kernels are shared by path); returns its path in the server."""
        dest = f"{Path(name).stem}-{uuid.uuid4().hex[:8]}.ipynb"
        shutil.copy(NOTEBOOKS / name, self.root / dest)
        return dest

    def write_notebook(self, *cells: str) -> str:
        """A new notebook of these code cells under a unique name; returns its path in the server."""
        import nbformat

        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        dest = f"panel-{uuid.uuid4().hex[:8]}.ipynb"
        nbformat.write(nb, self.root / dest)
        return dest


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token; ``window.jupyterapp`` exposed for run-all."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    root.mkdir()
    notify = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    notify.mkdir(parents=True)
    (notify / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp / "lab.log"
    cmd = [str(BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_server_env(tmp), cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/api/status?token={token}", proc, log)
        yield Server(url, token, root, proc)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def voila_server(tmp_path_factory):
    """Voilà serving a copy of 00_workbench.ipynb (no code cells shown)."""
    tmp = tmp_path_factory.mktemp("voila")
    root = tmp / "root"
    root.mkdir()
    shutil.copy(NOTEBOOKS / "00_workbench.ipynb", root / "00_workbench.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp / "voila.log"
    cmd = [str(BIN / "voila"), str(root / "00_workbench.ipynb"), "--no-browser", f"--port={port}",
           "--Voila.ip=127.0.0.1", f"--token={token}"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_server_env(tmp), cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url, proc, log, port_only=True)
        yield Server(url, token, root, proc)
    finally:
        _stop(proc)


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


# -- driving the panel in a page (JupyterLab or Voilà) ------------------------------------------------
class PanelUI:
    """Playwright steps on the tcbench panel, through its ``tcb-*`` CSS classes."""

    def __init__(self, page):
        self.page = page
        self.panel = page.locator(".tcb-panel").first

    def wait_shown(self, timeout_s: float = 90) -> None:
        self.panel.wait_for(state="visible", timeout=timeout_s * 1e3)
        self.panel.locator("button.tcb-run").first.wait_for(state="visible", timeout=timeout_s * 1e3)
        # one FigureWidget, four panels; the element itself carries ``tcb-figure js-plotly-plot``. It is drawn
        # (hidden, "what you will see" in its place) before the first run: attached, not visible.
        self.panel.locator(".tcb-figure .main-svg").first.wait_for(state="attached", timeout=timeout_s * 1e3)

    # -- the form ---------------------------------------------------------------------------------------
    FIELDS = ("model", "size", "profile", "batch-size", "seq-len", "steps", "warmup-steps", "lr", "rounds",
              "threads", "precision", "padding", "debug", "stall-s", "timeout-s")

    def visible_fields(self) -> list[str]:
        """The inputs a person sees now (``tcb-<field>`` classes), in form order."""
        return [f for f in self.FIELDS if self.panel.locator(f".tcb-{f}").first.is_visible()]

    def open_more_settings(self) -> None:
        section = self.panel.locator(".tcb-more-settings-section").first
        if not section.is_visible():
            self.panel.locator("button.tcb-more-settings").first.click()
        section.wait_for(state="visible", timeout=20_000)

    def backend_rows(self) -> dict[str, dict]:
        """Per backend, what is on screen: its box's and its text's bounding boxes, the text, ticked or not.
        ``eager`` is text only (the baseline always runs), with ``box`` None."""
        out = {}
        for name in ("eager", "inductor", "xla"):
            row = self.panel.locator(f".tcb-backend-{name}").first
            box = row.locator("input[type=checkbox]")
            text = row.locator("span").first
            out[name] = dict(box=box.bounding_box() if box.count() else None, text=text.inner_text(),
                             text_box=text.bounding_box(), checked=box.is_checked() if box.count() else None)
        return out

    def choose(self, cls: str, starts_with: str) -> None:
        """Pick the option of dropdown ``cls`` whose label starts with ``starts_with``."""
        select = self.panel.locator(f".{cls} select").first
        labels = select.evaluate("s => Array.from(s.options).map(o => o.label || o.textContent)")
        label = next(lbl for lbl in labels if lbl.replace("\xa0", " ").startswith(starts_with))  # ipywidgets: nbsp
        select.select_option(label=label)

    def type_number(self, cls: str, value) -> None:
        box = self.panel.locator(f".{cls} input").first
        box.fill(str(value))
        box.press("Enter")

    def tick(self, backend: str, on: bool) -> None:
        box = self.panel.locator(f".tcb-backend-{backend} input[type=checkbox]").first
        if box.is_checked() != on:
            box.click()

    def set_tiny_job(self, backends=("inductor",)) -> None:
        """Tiny GPT-2 at batch 8 × seq 64, the panel's default job: the graph the integration leg compiled before
        this leg (notebooks 01 and 04, the panel's real run), so a browser run loads it warm instead of paying a
        cold compile of a graph of its own (tiny BERT at batch 4 × 32 was one, 30-45 s here)."""
        self.open_more_settings()   # size, sequence length, steps, … are folded under "More settings"
        self.choose("tcb-size", "tiny")
        self.choose("tcb-model", "gpt2 ")
        # one round: typing a number of rounds runs that many (± goes to 0), where the adaptive default spent its
        # 60 s on 4-6 rounds that these tests do not read (the rounds' rule: tests/comparison/test_rounds.py)
        for cls, value in (("tcb-batch-size", 8), ("tcb-seq-len", 64), ("tcb-steps", 8), ("tcb-warmup-steps", 2),
                           ("tcb-rounds", 1), ("tcb-threads", 1)):
            self.type_number(cls, value)
        for name in ("inductor", "xla"):
            self.tick(name, name in backends)

    def run_paired(self, timeout_s: float) -> str:
        """Click Run paired and wait until the status says done (or failed); returns the status text."""
        run = self.panel.locator("button.tcb-run").first
        self.page.wait_for_function("b => !b.disabled", arg=run.element_handle(), timeout=20_000)
        run.click()
        try:  # the button is disabled while the run is on (so an earlier "Done" is not mistaken for this one)
            self.page.wait_for_function("b => b.disabled", arg=run.element_handle(), timeout=10_000)
        except Exception:  # noqa: BLE001 - a very short run may already be over
            pass
        status = self.panel.locator(".tcb-status").first
        self.page.wait_for_function(
            "el => /Done in|failed|Stopped/.test(el.textContent)", arg=status.element_handle(), timeout=timeout_s * 1e3)
        return status.inner_text()

    def option_labels(self, cls: str) -> list[str]:
        select = self.panel.locator(f".{cls} select").first
        return [t.replace("\xa0", " ") for t in select.evaluate("s => Array.from(s.options).map(o => o.label)")]

    # Panels of the figure: throughput xy, memory x2y2, loss x3y3, step time x4y4 (plotly subplot classes).
    def loss_legend(self) -> list[str]:
        return self.panel.locator(".tcb-figure .legendtext").all_text_contents()  # SVG text: no innerText

    def loss_traces(self) -> int:
        """Drawn line traces (with points) in the loss panel."""
        return self.panel.locator(".tcb-figure .subplot.x3y3 .scatterlayer .trace:has(path.js-line)").count()

    def throughput_bars(self) -> int:
        return self.panel.locator(".tcb-figure .subplot.xy .barlayer .trace").count()

    def throughput_texts(self) -> list[str]:
        return self.panel.locator(".tcb-figure .subplot.xy .barlayer text").all_text_contents()

    def wait_drawn(self, timeout_s: float = 60) -> None:
        """Wait until the finished run's throughput bars carry their speedup text ("1.2× (…)"): the status says Done
        as soon as the kernel sent the last figure update, and plotly draws it in the browser after that, seconds
        later when the machine is busy (a fixed 1.5 s wait once saw empty axes beside another test's jobs). Returns
        either way: the test's assertions then say what was drawn."""
        try:
            self.page.wait_for_function(
                "el => Array.from(el.querySelectorAll('.subplot.xy .barlayer text'))"
                ".some(t => t.textContent.includes('×'))",
                arg=self.panel.locator(".tcb-figure").first.element_handle(), timeout=timeout_s * 1e3)
        except Exception:  # noqa: BLE001 - playwright's TimeoutError
            pass

    def figure_shown(self) -> bool:
        return self.panel.locator(".tcb-figure").first.is_visible()

    def memory_axis(self) -> dict:
        """The memory panel as drawn: y tick values and their pixel y (centre), and per bar its height in
        pixels and its text ("42 MiB")."""
        ticks = self.panel.locator(".tcb-figure g.y2tick text")
        values = [_number(t) for t in ticks.all_text_contents()]
        ys = [(b["y"] + b["height"] / 2) for b in (ticks.nth(i).bounding_box() for i in range(ticks.count()))]
        bars = [self.panel.locator(".tcb-figure .subplot.x2y2 .barlayer .point").nth(i)
                for i in range(self.panel.locator(".tcb-figure .subplot.x2y2 .barlayer .point").count())]
        heights = [bar.locator("path").first.bounding_box()["height"] for bar in bars]
        texts = [bar.locator("text").first.text_content() if bar.locator("text").count() else "" for bar in bars]
        return dict(ticks=values, tick_y=ys, heights=heights, texts=texts)

    def assert_memory_axis_linear(self) -> dict:
        """The memory panel on screen is linear: tick values 0, d, 2d, … evenly spaced, and every bar as tall
        as its number says (on the old log axis 13 vs 66 MiB looked like 1.7×, not 5×)."""
        axis = self.memory_axis()
        ticks, ys = axis["ticks"], axis["tick_y"]
        assert len(ticks) >= 2 and ticks[0] == 0, f"a linear memory axis starts at 0: {ticks}"
        steps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert max(steps) - min(steps) < 1e-9 * max(steps) + 1e-9, f"tick values not evenly spaced (log axis?): {ticks}"
        gaps = [a - b for a, b in zip(ys, ys[1:])]
        assert max(gaps) - min(gaps) < 2.0, f"ticks not evenly spaced on screen: {ys}"
        px_per_unit = (ys[0] - ys[-1]) / (ticks[-1] - ticks[0])
        assert axis["heights"] and len(axis["heights"]) == len(axis["texts"]), axis
        for height, text in zip(axis["heights"], axis["texts"]):
            value = float(text.split()[0]) if text else 0.0   # "42 MiB", rounded to a whole MiB; no text: 0
            assert abs(height - value * px_per_unit) <= 0.6 * px_per_unit + 2, (height, text, px_per_unit, axis)
        return axis

    def annotations(self) -> list[str]:
        return self.panel.locator(".tcb-figure .annotation-text").all_text_contents()

    def summary_jobs(self) -> list[str]:
        """The job labels heading the summary table's columns (one column per job)."""
        heads = self.panel.locator(".tcb-summary table.tcb-summary thead th[scope=col]").all_inner_texts()
        return [h.strip() for h in heads[1:]]


def _number(text: str) -> float:
    """A plotly tick label as a number ("−5", "1.5k", "2M")."""
    text = text.replace("\u2212", "-").replace(",", "").strip()
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1:], 1.0)
    return float(text[:-1] if scale != 1.0 else text) * scale


@pytest.fixture(scope="session")
def panel_ui():
    return PanelUI
