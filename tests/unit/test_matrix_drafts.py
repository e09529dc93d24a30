"""Issue drafts carried night to night (pure, milliseconds): one draft per step however it is seen again
(latest moving past it, another grid line, a change point where no version moved), still there, worse,
gone (resolved), back (reopened)."""
from __future__ import annotations

from bisector.core.criterion import Criterion
from bisector.matrix.grid_result import (BaselineCell, CellResult, HistoryChange, HistoryLine, MatrixResult, Night,
                                         VersionStep)
from bisector.matrix.issue_drafts import file_name, track, worse

CRIT = Criterion(metric="m", max_increase="20%")


def night(n: int, latest: str, value: float, steps: list[VersionStep] = (), lines: list[HistoryLine] = (),
          cells: list[CellResult] | None = None) -> MatrixResult:
    cells = cells if cells is not None else [
        CellResult(key="1.0.0 | 4.0", labels=["1.0.0", "4.0"], versions={"acc": "1.0.0", "tf": "4.0"}, status="ok",
                   metrics={"m": 1.0}),
        CellResult(key="latest | 4.0", labels=["latest", "4.0"], versions={"acc": latest, "tf": "4.0"}, status="ok",
                   metrics={"m": value})]
    return MatrixResult(run_id=f"run{n}", created=f"2025-01-{n:02d}T02:00:00", grid_id="g", packages=["acc", "tf"],
                        grid={}, probe="p", criterion="c", criterion_metric="m", metrics=["m"], cells=cells,
                        version_steps=list(steps), history_lines=list(lines))


def step(bad: str, value: float, line: str = "tf==4.0") -> VersionStep:
    return VersionStep(line=line, metric="m", package="acc", good="1.0.0", bad=bad, good_key="1.0.0 | 4.0",
                       bad_key="latest | 4.0", good_value=1.0, bad_value=value, confirmed=True)


def test_one_draft_per_step_from_found_to_resolved_and_back():
    one = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    [d1] = track([], one, CRIT)
    assert d1.file == file_name("acc", "1.5.0", "m") == "acc-1.5.0-m.md" and d1.status == "open"
    two = night(2, "1.6.0", 2.0, [step("1.6.0", 2.0)])       # latest moved past the step: the same step
    [d2] = track([d1], two, CRIT)
    assert d2.file == d1.file and [n.state for n in d2.nights] == ["present", "present"]
    three = night(3, "1.6.0", 3.0, [step("1.6.0", 3.0)])
    [d3] = track([d2], three, CRIT)
    assert worse(d3, CRIT) == 3.0 and d3.nights[-1].value == 3.0
    four = night(4, "1.7.0", 1.0)                             # fixed: every cell past it within the criterion
    [d4] = track([d3], four, CRIT)
    assert d4.status == "resolved" and d4.resolved_run == "run4" and d4.nights[-1].state == "gone"
    five = night(5, "1.8.0", 2.5, [step("1.8.0", 2.5)])       # back: reopened, still one draft
    [d5] = track([d4], five, CRIT)
    assert d5.status == "open" and d5.resolved_run is None and len(d5.nights) == 5


def test_a_step_not_measured_tonight_keeps_its_draft_open():
    [d1] = track([], night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)]), CRIT)
    failed = CellResult(key="latest | 4.0", labels=["latest", "4.0"], versions={"acc": "1.6.0", "tf": "4.0"},
                        status="env-failed", reason="resolver conflict: x")
    [d2] = track([d1], night(2, "1.6.0", 0.0, cells=[failed]), CRIT)
    assert d2.status == "open" and d2.nights[-1].state == "not measured"


def test_other_lines_regressions_and_change_points_update_the_same_draft():
    [d1] = track([], night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)]), CRIT)
    regressed = night(2, "1.5.0", 2.0, [step("1.5.0", 2.0, line="tf==4.1")])
    regressed.cells[1] = regressed.cells[1].model_copy(update={
        "verdict": "regression", "confirmed": True,
        "baseline": BaselineCell(versions={"acc": "1.4.0", "tf": "4.0"}, status="ok", metrics={"m": 1.0})})
    [d2] = track([d1], regressed, CRIT)
    assert d2.lines == ["tf==4.0", "tf==4.1"] and d2.file == d1.file
    nights = [Night(run_id=f"n{i}", created=f"2025-01-{i + 1:02d}", value=1.0 if i < 4 else 2.0,
                    versions={"acc": "1.5.0", "tf": "4.0"}) for i in range(8)]
    change = HistoryChange(night=5, run_id="n4", created="2025-01-05", versions={"acc": "1.5.0", "tf": "4.0"},
                           before=1.0, after=2.0, relative=1.0, p_value=0.001, regression=True, new=True)
    line = HistoryLine(key="latest | 4.0", metric="m", method="e-divisive", nights=nights, changes=[change])
    drafts = track([d2], night(3, "1.5.0", 2.0, lines=[line]), CRIT)   # no version moved at the change
    assert [d.file for d in drafts] == [d1.file]
    again = track(drafts, night(4, "1.5.0", 2.0, lines=[line]), CRIT)
    assert [d.file for d in again] == [d1.file]


def test_a_draft_without_a_bisect_says_when_its_bad_version_is_the_first_bad(tmp_path):
    from bisector.matrix.draft_text import text
    from bisector.matrix.grid_config import MatrixConfig
    from bisector.store.storage import Store
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"], "tf": ["4.0"]}},
                                          "probe": {"name": "ga_memory"}})
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    [draft] = track([], result, CRIT)
    md = text(draft, result, config, Store(tmp_path / "s.db"))
    assert f"(bad): {draft.version} is the first bad release when no release lies between them" in md
    assert "no bisect has named" not in md   # adjacent releases: nothing is left to name


def test_the_index_says_whether_the_two_releases_are_adjacent(tmp_path):
    """Without a bisect, the draft reads the index: adjacent releases name the first bad release plainly;
    releases between them are listed; an index that cannot be read leaves the hedge."""
    import datetime as dt
    from bisector.errors import BisectorError
    from bisector.matrix.draft_text import text
    from bisector.matrix.grid_config import MatrixConfig
    from bisector.matrix.issue_drafts import with_releases_between
    from bisector.sources.index import Release
    from bisector.store.storage import Store
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"], "tf": ["4.0"]}},
                                          "probe": {"name": "ga_memory"}})
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    [draft] = track([], result, CRIT)
    when = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    index = lambda *versions: lambda package: [Release(version=v, uploaded=when) for v in versions]  # noqa: E731
    [adjacent] = with_releases_between([draft], index("0.9.0", "1.0.0", "1.5.0", "1.6.0"))
    assert adjacent.releases_between == []
    md = text(adjacent, result, config, Store(tmp_path / "s.db"))
    assert "acc 1.0.0 and 1.5.0 are adjacent releases on the package index: 1.5.0 is the first bad release." in md
    assert "when no release lies between" not in md and "no bisect has" not in md
    [apart] = with_releases_between([draft], index("1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"))
    md = text(apart, result, config, Store(tmp_path / "s2.db"))
    assert ("The package index lists 4 releases of acc between 1.0.0 (good) and 1.5.0 (bad) (1.1.0, 1.2.0, 1.3.0, ...); "
            "no bisect has named the first bad one yet") in md

    def unreadable(package):
        raise BisectorError("index down")
    assert with_releases_between([draft], unreadable) == [draft]
    assert with_releases_between([draft], index("1.5.0")) == [draft]      # the good end is not listed: no claim
