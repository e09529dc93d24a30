"""Six nights of one grid over a loopback index, end to end: no cell lost in silence, one issue draft per
step, and every link of the reports resolving.

tinypkg = [1.0.0, latest] x tinyextra = [1.0.0, 2.0.0]; tinyextra 2.0.0 declares ``tinypkg>=1.1`` (in an
extra), so (1.0.0, 2.0.0) is not a valid combination and is never built.

1, 2: latest = 1.1.0: every valid cell measured (the second night from the store), exit 0.
3: tinypkg 1.2.0 needs tinyhelper, which needs tinyextra>=2: the cell with tinyextra 1.0.0 cannot be
   built (a resolver conflict the metadata of the grid's own packages does not declare): lost, exit 4.
4: tinypkg 1.3.0 keeps 400 KiB where 1.0.0 kept 100 (the planted step): a step along the versions and a
   regression against night 3, exit 1, one issue draft.
5: nothing new: the draft is updated (present on 2 of 2 nights), exit 0.
6: tinypkg 1.4.0 is back at 100 KiB: the draft is marked resolved; still one file."""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from bisector.cli.main import main
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.unit.test_matrix import matrix_cli, tiny_source, write_config

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
DRAFT = "tinypkg-1.3.0-buffer_kib.md"


def _publish(idx: LocalIndex, wheels: Path, name: str, version: str, day: float, **kw) -> None:
    idx.add(build_wheel(wheels, name, version, **kw), T0 + dt.timedelta(days=day))


@pytest.fixture(scope="module")
def nights(tmp_path_factory, env_cache, plain_spec):
    root = tmp_path_factory.mktemp("nights")
    idx, wheels = LocalIndex(root / "idx"), root / "w"
    _publish(idx, wheels, "tinypkg", "1.0.0", 0, module_source=tiny_source(100))
    _publish(idx, wheels, "tinypkg", "1.1.0", 1, module_source=tiny_source(100))
    _publish(idx, wheels, "tinyextra", "1.0.0", 0, module_source="LEVEL = 1\n")
    _publish(idx, wheels, "tinyextra", "2.0.0", 1, module_source="LEVEL = 2\n",
             dependencies=['tinypkg>=1.1; extra == "tiny"'])
    config = write_config(root / "bisect.toml", plain_spec, 'tinypkg = ["1.0.0", "latest"]\ntinyextra = ["1.0.0", "2.0.0"]')
    out, html, issues = root / "out", root / "html", root / "issues"
    later = {3: [("tinyhelper", "1.0.0", 1.5, {"dependencies": ["tinyextra>=2"]}),
                 ("tinypkg", "1.2.0", 2, {"module_source": tiny_source(100), "dependencies": ["tinyhelper"]})],
             4: [("tinypkg", "1.3.0", 3, {"module_source": tiny_source(400)})],
             6: [("tinypkg", "1.4.0", 4, {"module_source": tiny_source(100)})]}
    runs = {}
    with idx.serve() as url:
        for night in range(1, 7):
            for name, version, day, kw in later.get(night, []):
                _publish(idx, wheels, name, version, day, **kw)
            code = matrix_cli("--config", str(config), "--index-url", url, "--store", str(root / "s.db"),
                              "--cache-dir", str(env_cache), "--out", str(out), "--html", str(html),
                              "--issues", str(issues))
            runs[night] = {"code": code, "json": json.loads((out / "matrix.json").read_text()),
                           "md": (out / "matrix.md").read_text(), "drafts": sorted(p.name for p in issues.glob("*.md")),
                           "draft": (issues / DRAFT).read_text() if (issues / DRAFT).is_file() else None,
                           "out": out, "html": html}
    return {"root": root, "runs": runs}


def test_two_quiet_nights_measure_every_valid_cell_and_list_the_invalid_one(nights):
    first, second = nights["runs"][1], nights["runs"][2]
    assert first["code"] == 0 and second["code"] == 0
    for run in (first, second):
        assert [c["versions"] for c in run["json"]["invalid"]] == [{"tinypkg": "1.0.0", "tinyextra": "2.0.0"}]
        assert run["json"]["invalid"][0]["reason"] == "tinyextra 2.0.0 requires tinypkg>=1.1 (in its extra: tiny)"
        assert len(run["json"]["cells"]) == 3 and all(c["status"] == "ok" for c in run["json"]["cells"])
    assert first["json"]["probes_run"] == 3 and second["json"]["probes_run"] == 0
    assert "## Not a valid combination (1 cell, never built)" in first["md"]
    assert "3 of 4 cells measured, 1 not a valid combination" in first["md"]


def test_a_cell_that_cannot_be_built_tonight_is_lost_and_exits_4(nights):
    night = nights["runs"][3]
    assert night["code"] == 4 and night["json"]["exit_code"] == 4 and night["json"]["cells_lost"] == 1
    [lost] = [c for c in night["json"]["cells"] if c["verdict"] == "lost"]
    assert lost["versions"] == {"tinypkg": "1.2.0", "tinyextra": "1.0.0"} and lost["status"] == "env-failed"
    assert lost["reason"].startswith("resolver conflict: ") and "tinyhelper" in lost["reason"]
    assert "tinyextra" in lost["reason"] and "\n" not in lost["reason"]
    assert "**1 cell lost**" in night["md"] and f"**LOST**: env-failed: {lost['reason'][:40]}" in night["md"].replace("\\", "")
    assert "## Not measured (1 cell, 1 lost)" in night["md"]
    assert "tinypkg==1.2.0, tinyextra==1.0.0 (latest | 1.0.0): env-failed: resolver conflict" in night["md"].replace("\\", "")
    others = [c for c in night["json"]["cells"] if c["verdict"] != "lost"]
    assert all(c["status"] == "ok" for c in others)   # the other cell with 1.2.0 built and measured


def test_the_planted_step_writes_one_draft_that_later_nights_update(nights):
    runs = nights["runs"]
    assert runs[4]["code"] == 1 and runs[5]["code"] == 0 and runs[6]["code"] == 0
    assert runs[3]["drafts"] == [] and [runs[n]["drafts"] for n in (4, 5, 6)] == [[DRAFT]] * 3
    [step] = [s for s in runs[4]["json"]["version_steps"] if s["confirmed"]]
    assert (step["good"], step["bad"], step["line"]) == ("1.0.0", "1.3.0", "tinyextra==1.0.0")
    [d4], [d5], [d6] = (runs[n]["json"]["issue_drafts"] for n in (4, 5, 6))
    assert d4["file"] == DRAFT and d4["status"] == "open" and d4["first_run"] == runs[4]["json"]["run_id"]
    assert [n["state"] for n in d5["nights"]] == ["present", "present"] and d5["first_run"] == d4["first_run"]
    assert d6["status"] == "resolved" and [n["state"] for n in d6["nights"]] == ["present", "present", "gone"]
    assert runs[4]["draft"].startswith("# tinypkg 1.3.0: buffer\\_kib 100.0 KiB → 400.0 KiB\n")
    assert "**Open**: present on 1 of 1 nights" in runs[4]["draft"]
    assert "**Open**: present on 2 of 2 nights" in runs[5]["draft"]
    assert "**Resolved** on " in runs[6]["draft"] and "is back to 100" in runs[6]["draft"]
    assert "bisector run --package tinypkg --good 1.0.0 --bad 1.3.0 --mode releases --with tinyextra==1.0.0" in \
        runs[4]["draft"]
    assert f"`{DRAFT}`: tinypkg 1.3.0, buffer\\_kib; open, present on 2 of 2 nights" in runs[5]["md"]


def _links(md: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", md) if "://" not in t]


@pytest.mark.parametrize("night", [3, 4, 6])
def test_every_link_of_the_reports_and_the_page_resolves(nights, night):
    run = nights["runs"][night]
    for folder in (run["out"], run["html"]):
        md = (folder / "matrix.md").read_text()
        for target in _links(md):
            assert (folder / target).is_file(), (folder, target)
    page = (run["html"] / "index.html").read_text()
    hrefs = re.findall(r'(?:href|src)="([^"]+)"', page)
    assert hrefs and all("://" not in h and (run["html"] / h).is_file() for h in hrefs), hrefs


def test_log_report_and_runs_read_a_matrix_run(nights, capsys):
    store = str(nights["root"] / "s.db")
    lost_run = nights["runs"][3]["json"]["run_id"]
    assert main(["log", lost_run, "--store", store]) == 0
    log = capsys.readouterr().out
    assert log.startswith(f"# bisector matrix {lost_run}: tinypkg = 1.0.0, latest; tinyextra = 1.0.0, 2.0.0")
    assert "\nlost tinypkg==1.2.0, tinyextra==1.0.0 (" in log and "# resolver conflict: " in log
    assert "\ninvalid tinypkg==1.0.0, tinyextra==2.0.0 # tinyextra 2.0.0 requires tinypkg>=1.1" in log
    assert main(["log", "--store", store]) == 0   # the latest finished run: night 6's matrix run
    assert capsys.readouterr().out.startswith(f"# bisector matrix {nights['runs'][6]['json']['run_id']}:")
    for fmt, start in (("text", "1 cell lost"), ("markdown", "# Version matrix: tinypkg"), ("json", "{")):
        assert main(["report", lost_run, "--store", store, "--format", fmt]) == 0
        assert capsys.readouterr().out.startswith(start)
    assert main(["report", lost_run, "--store", store, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cells_lost"] == 1
    assert main(["runs", "--store", store, "--kind", "matrix"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 1 + 6 + 1 and listed[-1] == "6 run(s): 6 matrix"   # header, six nights, total
    assert main(["report", "--kind", "bisect", "--store", store]) == 2
    assert capsys.readouterr().err == f"bisector: error: no finished bisect runs in {store}\n"
