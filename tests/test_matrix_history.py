"""``bisector matrix`` over a long history, end to end: 29 stored nights of the same grid (a step at night
12 in the ``latest`` cell), then one real run over a loopback index (night 30). The history's change
point is found at night 12 and is new, the run's own step along the versions (1.0.0 -> 1.1.0) is
re-measured and bisected, the exit code is 1, and ``--html`` writes a page that headless Chromium
(Debian's ``chromium``) renders with its plots and links."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bisector.matrix.cells import grid_id
from bisector.matrix.grid_config import load_matrix_config
from bisector.matrix.grid_result import CellResult, MatrixResult
from bisector.storage import RunKind, RunRow, RunState, Store
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.test_matrix import matrix_cli, tiny_source, write_config

pytestmark = pytest.mark.slow
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
PNG = b"\x89PNG\r\n\x1a\n"


def store_nights(store: Store, gid: str, config: dict) -> None:
    """Nights 1..29: ``1.0.0`` at 100 KiB; ``latest`` 1.0.0 (100 KiB) until night 11, 1.1.0 (400) from 12."""
    for night in range(1, 30):
        created = (T0 + dt.timedelta(days=night)).isoformat(timespec="microseconds")
        late = night >= 12
        cells = [CellResult(key="1.0.0", labels=["1.0.0"], versions={"tinypkg": "1.0.0"}, status="ok",
                            metrics={"buffer_kib": 100.0}),
                 CellResult(key="latest", labels=["latest"], versions={"tinypkg": "1.1.0" if late else "1.0.0"},
                            status="ok", metrics={"buffer_kib": 400.0 if late else 100.0})]
        result = MatrixResult(run_id=f"night{night:02d}", created=created, grid_id=gid, packages=["tinypkg"],
                              grid={"tinypkg": ["1.0.0", "latest"]}, probe="tiny_memory.py", criterion="c",
                              criterion_metric="buffer_kib", metrics=["buffer_kib"], cells=cells)
        store.put_run(RunRow(id=result.run_id, created=created, updated=created, kind=RunKind.MATRIX,
                             command=["bisector", "matrix"], config=config, status=RunState.DONE,
                             result=result.model_dump(mode="json")))


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render(page: Path, tmp_path: Path, *what: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--window-size=1200,2600", *what, page.as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def night30(tmp_path_factory, env_cache, plain_spec):
    root = tmp_path_factory.mktemp("history")
    idx = LocalIndex(root / "idx")
    for day, (version, kib) in enumerate([("1.0.0", 100), ("1.1.0", 400)]):
        idx.add(build_wheel(root / "w", "tinypkg", version, module_source=tiny_source(kib)), T0 + dt.timedelta(days=day))
    config = write_config(root / "bisect.toml", plain_spec, 'tinypkg = ["1.0.0", "latest"]')
    with idx.serve() as url:
        loaded = load_matrix_config(config, {"matrix": {"index_url": url}})
        store = Store(root / "s.db")
        store_nights(store, grid_id(loaded), loaded.model_dump(mode="json"))
        store.close()
        code = matrix_cli("--config", str(config), "--index-url", url, "--store", str(root / "s.db"),
                          "--cache-dir", str(env_cache), "--out", str(root / "out"), "--html", str(root / "html"),
                          "--bisect-on-regression")
    return {"code": code, "out": json.loads((root / "out" / "matrix.json").read_text()), "html": root / "html",
            "root": root}


def test_the_history_change_point_is_found_at_night_12_and_counts(night30):
    out = night30["out"]
    assert night30["code"] == 1 and out["exit_code"] == 1 and out["history"] == 29
    lines = {line["key"]: line for line in out["history_lines"]}
    assert lines["1.0.0"]["method"] == "e-divisive" and lines["1.0.0"]["changes"] == []
    latest = lines["latest"]
    assert latest["method"] == "e-divisive" and len(latest["nights"]) == 30
    [change] = latest["changes"]
    assert (change["night"], change["run_id"], change["regression"], change["new"]) == (12, "night12", True, True)
    assert change["before"] == 100 and change["after"] == 400 and change["versions"] == {"tinypkg": "1.1.0"}
    assert out["cells"][1]["verdict"] == "same"   # against last night nothing moved: only the history shows it


def test_the_step_along_the_versions_is_confirmed_and_bisected(night30):
    out = night30["out"]
    [step] = out["version_steps"]
    assert (step["good"], step["bad"], step["confirmed"], step["new"]) == ("1.0.0", "1.1.0", True, True)
    [bisect] = out["bisects"]
    assert (bisect["good"], bisect["bad"], bisect["status"], bisect["first_bad"]) == ("1.0.0", "1.1.0", "found", "1.1.0")
    report = (night30["root"] / "out" / "matrix.md").read_text()
    assert "## History (30 nights, e-divisive)" in report and "night 12 of 30" in report
    assert "## Steps along the tinypkg versions" in report


@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed (Debian: apt-get install chromium)")
def test_the_history_page_renders_in_headless_chromium_with_its_plots_and_links(night30, tmp_path):
    page = night30["html"] / "index.html"
    dom = render(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count('<svg class="plot"') == 3            # two cells over the nights, one grid line over versions
    assert html.count('data-kind="nights"') == 2 and html.count('data-kind="versions"') == 1
    assert 'class="change-point"' in html and "+300.0% new" in html
    links = [chunk.split('"', 1)[0] for chunk in html.split('class="bisect-report" href="')[1:]]
    assert links == ["bisect-tinypkg-1.0.0-1.1.0.md"] and (night30["html"] / links[0]).is_file()
    assert (night30["html"] / "matrix.md").is_file() and 'href="matrix.md"' in html
    shot = tmp_path / "page.png"
    done = render(page, tmp_path, f"--screenshot={shot}")
    assert done.returncode == 0 and shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000, done.stderr[-2000:]
