"""``bisector matrix`` over a long history, end to end: 29 stored nights of the same grid (a step at night
12 in the ``latest`` cell), then one real run over a loopback index (night 30). The history's change
point is found at night 12 and is new, the run's own step along the versions (1.0.0 -> 1.1.0) is
re-measured and bisected, the exit code is 1, and ``--html`` writes a page that headless Chromium
(Debian's ``chromium``) renders with its plots and links."""
from __future__ import annotations

import datetime as dt
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bisector.matrix.cells import grid_id
from bisector.matrix.grid_config import load_matrix_config
from bisector.core.units import human_value
from bisector.matrix.grid_result import CellResult, HistoryChange, HistoryLine, MatrixResult, Night
from bisector.matrix.html import write_html
from bisector.store.storage import RunKind, RunRow, RunState, Store
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.unit.test_matrix import matrix_cli, tiny_source, write_config

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


def render(page: Path, tmp_path: Path, *what: str, width: int = 1280) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{width}"   # a fresh profile per render
    profile.mkdir(exist_ok=True)
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--window-size={width},2600", *what, page.as_uri()]
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


MEASURE = """<script>
const box = r => ({l: r.left, r: r.right, t: r.top, b: r.bottom});
const out = {width: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth, plots: [],
             cells: [...document.querySelectorAll('td[data-value]')].map(td => ({key: td.dataset.key,
               metric: td.dataset.metric, value: parseFloat(td.dataset.value), text: td.textContent}))};
for (const svg of document.querySelectorAll('svg.plot')) {
  out.plots.push({kind: svg.dataset.kind, metric: svg.dataset.metric, box: box(svg.getBoundingClientRect()),
    texts: [...svg.querySelectorAll('text')].map(t => ({cls: t.getAttribute('class') || '', text: t.textContent,
                                                        ...box(t.getBoundingClientRect())})),
    points: [...svg.querySelectorAll('circle.point')].map(c => ({series: c.dataset.series, x: c.dataset.x,
                                                                 value: parseFloat(c.dataset.value)}))});
}
const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def measure_page(page: Path, tmp_path: Path, width: int) -> dict:
    """Render a copy of ``page`` (with a measuring script; the page itself has none) in headless Chromium at
    ``width`` px and return every plot's box, its texts' boxes and points, and the table's numbers."""
    probe = page.with_name(f"measured-{width}.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    done = render(probe, tmp_path, "--dump-dom", width=width)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    return json.loads(html.unescape(found[1]))


def assert_every_label_inside(measured: dict) -> None:
    """Every text of every plot lies inside the plot's box, and no plot is wider than the page."""
    assert measured["plots"] and measured["scroll"] <= measured["width"]
    for plot in measured["plots"]:
        b = plot["box"]
        assert b["r"] <= measured["width"] + 0.5, plot["kind"]
        ticks = [t for t in plot["texts"] if "tick" in t["cls"]]
        assert any("y-tick" in t["cls"] for t in ticks) and any("x-tick" in t["cls"] for t in ticks)
        for t in plot["texts"]:
            inside = b["l"] - 0.5 <= t["l"] and t["r"] <= b["r"] + 0.5 and b["t"] - 0.5 <= t["t"] and t["b"] <= b["b"] + 0.5
            assert inside, (plot["kind"], plot["metric"], t, b)


def assert_numbers_match(measured: dict, out: dict) -> None:
    """The table's numbers and every plotted point are matrix.json's."""
    cells = {c["key"]: c for c in out["cells"]}
    assert measured["cells"]
    for td in measured["cells"]:
        assert td["value"] == cells[td["key"]]["metrics"][td["metric"]]
        assert td["text"] == human_value(td["value"], td["metric"])
    nights = {(f"cell {line['key']}", line["metric"]): [n["value"] for n in line["nights"]] for line in out["history_lines"]}
    for plot in measured["plots"]:
        for series in {p["series"] for p in plot["points"]}:
            drawn = [p["value"] for p in plot["points"] if p["series"] == series]
            if plot["kind"] == "nights":
                assert drawn == nights[(series, plot["metric"])]
            else:
                line = [c["metrics"][plot["metric"]] for c in out["cells"] if plot["metric"] in c["metrics"]
                        and (", ".join(f"{p}=={c['versions'][p]}" for p in out["packages"][1:]) or out["packages"][0])
                        == series]
                assert sorted(drawn) == sorted(line)


needs_chromium = pytest.mark.skipif(chromium() is None,
                                    reason="headless Chromium is not installed (Debian: apt-get install chromium)")


@needs_chromium
def test_the_history_page_renders_in_headless_chromium_with_its_plots_and_links(night30, tmp_path):
    page = night30["html"] / "index.html"
    dom = render(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert text.count('<svg class="plot"') == 2            # the cells over the nights, the grid line over versions
    assert text.count('data-kind="nights"') == 1 and text.count('data-kind="versions"') == 1
    assert 'class="change-point mark-ring"' in text and "+300.0% new" in text and "<script" not in text
    links = [chunk.split('"', 1)[0] for chunk in text.split('class="bisect-report" href="')[1:]]
    assert links == ["bisect-tinypkg-1.0.0-1.1.0.md"] and (night30["html"] / links[0]).is_file()
    assert (night30["html"] / "matrix.md").is_file() and 'href="matrix.md"' in text
    assert not re.search(r'(?:src|href)="(?:https?:)?//', text)   # nothing from the network: it works offline
    shot = tmp_path / "page.png"
    done = render(page, tmp_path, f"--screenshot={shot}")
    assert done.returncode == 0 and shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000, done.stderr[-2000:]


@needs_chromium
@pytest.mark.parametrize("width", [1280, 800])
def test_every_label_is_inside_its_plot_and_the_numbers_are_matrix_json(night30, tmp_path, width):
    measured = measure_page(night30["html"] / "index.html", tmp_path, width)
    assert_every_label_inside(measured)
    assert_numbers_match(measured, night30["out"])


def wide_result() -> MatrixResult:
    """A page with what clipped before: B/param values (1.244 B/param read '244 B/param'), GiB values, long
    version labels, twelve cells (two night charts), change points near both edges."""
    metrics = ["ga_excess_bytes_per_param", "peak_bytes"]
    cells, lines = [], []
    for i in range(12):
        local = f"g{i:07d}" if i < 11 else "g" + "0123456789abcdef" * 6   # one label far too long to show whole
        key = f"latest~{i} | 4.40.0.dev0+{local}"
        versions = {"accelerate": f"0.{20 + i}.0", "transformers": f"4.40.0.dev0+{local}"}
        value = 1.244 if i % 2 else 0.0
        cells.append(CellResult(key=key, labels=[f"latest~{i}", versions["transformers"]], versions=versions, status="ok",
                                metrics={"ga_excess_bytes_per_param": value, "peak_bytes": 3.5 * 2 ** 30 + i * 2 ** 27}))
        for metric, base in (("ga_excess_bytes_per_param", value), ("peak_bytes", 3.5 * 2 ** 30)):
            nights = [Night(run_id=f"n{k}", created=f"2024-03-{k + 1:02d}T02:00:00", value=base + (base or 1) * 0.4 * (k >= 6),
                            versions=versions) for k in range(9)]
            change = HistoryChange(night=7, run_id="n6", created=nights[6].created, versions=versions, before=base,
                                   after=base + 0.5, relative=0.4, p_value=0.001, regression=True, new=True)
            lines.append(HistoryLine(key=key, metric=metric, method="e-divisive", nights=nights, changes=[change]))
    return MatrixResult(run_id="wide", created="2024-03-09T02:00:00", grid_id="g", packages=["accelerate", "transformers"],
                        grid={"accelerate": ["latest-12"], "transformers": ["latest"]}, probe="ga_memory",
                        criterion="ga_excess_bytes_per_param moves up more than 20% from the baseline cell",
                        criterion_metric="ga_excess_bytes_per_param", metrics=metrics, cells=cells, history_lines=lines)


@needs_chromium
@pytest.mark.parametrize("width", [1280, 800])
def test_a_page_of_long_labels_and_large_values_keeps_every_label_inside(tmp_path, width):
    result = wide_result()
    page = write_html(result, tmp_path / "html", tmp_path / "none")
    measured = measure_page(page, tmp_path, width)
    assert_every_label_inside(measured)
    assert_numbers_match(measured, result.model_dump(mode="json"))
    ticks = [t["text"] for p in measured["plots"] for t in p["texts"] if "y-tick" in t["cls"]]
    assert "1.500 B/param" in ticks and any(t.endswith(" GiB") for t in ticks)
    assert len([p for p in measured["plots"] if p["kind"] == "nights"]) == 4   # 12 cells, 10 a chart, 2 metrics
