"""Reports of fixed, hand-made results: golden markdown and JSON, the markdown rendered to HTML
(links, step table, nothing injected), the explanation of a move, and the report / log / runs
commands over a stored run. UPDATE_GOLDEN=1 rewrites the golden files."""
from __future__ import annotations

import shlex
import datetime as dt
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import markdown as pymd
import pytest

from bisector.redact import mask_words

from bisector.bisection.boundary import merge_sides
from bisector.cli.main import main
from bisector.job.commandline import shown_command
from bisector.core.changes import Confirmation
from bisector.core.result import BisectResult, Repro, ReproSide
from bisector.core.points import Point, PointEnv, RunEnvironment, Step
from bisector.explain.registry import compact_details, explain, metric_label
from bisector.explain.sites import by_site, site_sentence
from bisector.core.result import made_by
from bisector.core.verdict import Verdict
from bisector.report.markdown import GITHUB_LIMIT, markdown
from bisector.report.env_labels import flat
from bisector.report.render import REPORT_SCHEMA, render_json, render_markdown
from bisector.report.text import render_text
from bisector.store.storage import RunRow, StepRow, Store, now

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
REPO = "https://github.com/huggingface/accelerate"
T0 = dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
NASTY = ("Speed up GA | fix <script>alert('x')</script> `oops` [docs](javascript:alert(1)) "
         "<img src=x onerror=alert(1)> @maintainer (#1234)")
SHA = {i: f"{i:x}" * 40 for i in range(1, 10)}


def _commit(i: int, subject: str, value=None, pr=None, metrics=None) -> Point:
    return Point(ref=SHA[i][:12], kind="commit", sha=SHA[i], date=T0 + dt.timedelta(days=i), subject=subject,
                 author="Dev One", pr=pr, link=f"{REPO}/commit/{SHA[i]}",
                 pr_link=f"{REPO}/pull/{pr}" if pr else None, value=value, metrics=metrics or {})


def _step(seq, candidate, verdict, value=None, day=0, phase="commits", metric="peak_bytes", **kw) -> Step:
    return Step(seq=seq, phase=phase, candidate=candidate, date=T0 + dt.timedelta(days=day), verdict=verdict,
                metric=metric, value=value, repeats=kw.pop("repeats", 1), seconds=kw.pop("seconds", 7.5), **kw)


def _log(steps: list[Step]) -> list[str]:
    return [s.log_line() for s in steps]


CUDA_ENV = {"python": "3.11.7", "torch": "2.3.1+cu121", "transformers": "4.32.0", "cuda": "12.1",
            "gpu": "NVIDIA A100-SXM4-80GB", "driver": "550.54.15", "meter": "cuda"}


def found_commit() -> BisectResult:
    mib = 1 << 20
    steps = [_step(0, SHA[1][:10], "good", 100 * mib, 1), _step(1, SHA[9][:10], "bad", 180 * mib, 9),
             _step(2, SHA[5][:10], "skip", None, 5, reason="crashed: probe exited 1: <b>x</b> | `y` (#77)"),
             _step(3, SHA[6][:10], "bad", 180 * mib, 6), _step(4, SHA[4][:10], "good", 100 * mib, 4, reused=True),
             _step(5, SHA[5][:10], "bad", 181 * mib, 5, phase="commits:confirm", repeats=3)]
    r = BisectResult(
        run_id="a1b2c3d4e5f6", package="accelerate", mode="commit", status="found",
        reason=f"{SHA[5][:10]} is the first bad candidate and {SHA[4][:10]} the last good one",
        criterion="peak_bytes > 1.47e+08", threshold=1.47e8, first_bad=_commit(5, NASTY, 181 * mib, 1234, {"peak_bytes": 181 * mib}),
        last_good=_commit(4, "Refactor the loop (#1200)", 100 * mib, 1200, {"peak_bytes": 100 * mib}),
        probes_run=5, measurements_reused=1, steps=steps, compare_link=f"{REPO}/compare/{SHA[4]}...{SHA[5]}",
        command="bisector run --package accelerate --mode commits --repo https://github.com/huggingface/accelerate"
                " --good v0.21.0 --bad v0.22.0 --probe my_probe.py --metric peak_bytes --threshold 147000000"
                " --index-url https://user:s3cret@pypi.example/simple --store /home/me/s.db --json",
        decision_rule="one measurement per candidate, BAD when it is beyond the threshold, else GOOD",
        probe={"probe": "my_probe.py", "kind": "script", "fingerprint": "0123456789abcdef", "timeout": 1800.0},
        environment={"os": "Linux-6.8-x86_64", "python": "3.11.7", "torch": "2.3.1+cu121", "cuda": "12.1",
                     "gpu": "NVIDIA A100-SXM4-80GB", "driver": "550.54.15", "env spec": "default"},
        notes=["v0.21.0 is not an ancestor of v0.22.0: bisecting from their merge-base 0123456789ab"],
        log=_log(steps), good_end=_commit(1, "Start", 100 * mib), bad_end=_commit(9, "End", 180 * mib),
        confirmation=Confirmation(status="confirmed", culprit=SHA[5], onto=SHA[9], verdict="good", value=100 * mib,
                                  reason=f"reverting {SHA[5][:10]} on {SHA[9][:10]} measured GOOD: the revert undoes "
                                         "the step"),
        repro=Repro(path="/tmp/work/repro.py", metric="peak_bytes", threshold=1.47e8, verified=True,
                    last_good=ReproSide(value=100 * mib, verdict="good"), first_bad=ReproSide(value=181 * mib, verdict="bad")))
    for p, version in ((r.last_good, "0.22.0.dev1200"), (r.first_bad, "0.22.0.dev1234")):
        p.env = PointEnv.model_validate({**CUDA_ENV, "accelerate": version})
        p.pins = [f"accelerate=={version}", "torch==2.3.1+cu121", "transformers==4.32.0"]
    return r


# ga_memory: peak = slope * n_params + fixed per (precision, GA); the first bad's bf16 GA=1 peak fell.
N_PARAMS = {64: 120_000, 128: 400_000, 256: 1_450_000}
GOOD_SLOPES = {("fp32", 1): 16.0, ("fp32", 2): 16.375, ("bf16", 1): 14.0, ("bf16", 2): 14.375}
BAD_SLOPES = {**GOOD_SLOPES, ("bf16", 1): 12.4375}


MIB = 1 << 20
GOOD_SITES = [{"site": "pre-existing", "bytes": 4 * MIB},
              {"site": "float32 ToCopyBackward0 | accelerate/accelerator.py:1980 backward", "bytes": 3 * MIB},
              {"site": "bfloat16 | transformers/models/gpt_neox/modeling_gpt_neox.py:1060 forward", "bytes": MIB},
              {"site": "(7 other sites)", "bytes": 5000}]
BAD_SITES = [{"site": "pre-existing", "bytes": 4 * MIB},
             {"site": "float32 ToCopyBackward0 | accelerate/accelerator.py:2001 backward", "bytes": 3 * MIB},
             {"site": "float32 AccumulateGrad | accelerate/accelerator.py:2001 backward", "bytes": 2 * MIB},
             {"site": "float32 | accelerate/accelerator.py:2001 backward", "bytes": 4}]


def ga_side(slopes: dict, bf16_ga1_phase: str, sites: list | None = None) -> tuple[dict, dict]:
    metrics, cells = {f"n_params.h{h}": float(n) for h, n in N_PARAMS.items()}, []
    for h, n in N_PARAMS.items():
        for (prec, ga), a in slopes.items():
            peak = a * n + 1_048_576 * ga
            metrics[f"peak_bytes.{prec}.ga{ga}.h{h}"] = peak
            phase = bf16_ga1_phase if (prec, ga) == ("bf16", 1) else f"m{ga - 1}.backward"
            cells.append({"hidden": h, "precision": prec, "ga": ga, "n_params": n, "peak_bytes": peak,
                          "peak_phase": phase, "phases": {"m0.forward": peak / 2, phase: peak}})
            if sites and (prec, ga, h) == ("bf16", 1, max(N_PARAMS)):
                cells[-1]["attribution"] = sites
    s = slopes
    metrics.update({"ga_cost_bytes_per_param": s[("bf16", 2)] - s[("bf16", 1)],
                    "fp32_ga_cost_bytes_per_param": s[("fp32", 2)] - s[("fp32", 1)],
                    "mixed_cost_bytes_per_param": s[("bf16", 1)] - s[("fp32", 1)],
                    "ga_excess_bytes_per_param": s[("bf16", 2)] - s[("bf16", 1)] - s[("fp32", 2)] + s[("fp32", 1)],
                    "fit_r2_min": 1.0})
    return metrics, {"cells": cells}


def release_ga() -> BisectResult:
    metric = "ga_cost_bytes_per_param"
    (gm, gd), (bm, bd) = ga_side(GOOD_SLOPES, "m0.backward", GOOD_SITES), ga_side(BAD_SLOPES, "m0.step", BAD_SITES)
    versions = ["0.19.0", "0.23.0", "0.21.0", "0.22.0", "0.20.0"]
    values = [0.375, 1.9375, 0.375, 1.9375, 0.375]
    steps = [Step(seq=i, phase="releases", candidate=v, date=T0 + dt.timedelta(days=30 * i), verdict=verdict,
                  metric=metric, value=x, repeats=3, seconds=95.25 + i)
             for i, (v, x, verdict) in enumerate(zip(versions, values, ["good", "bad", "good", "bad", "good"]))]
    point = dict(kind="release", pr=None)
    r = BisectResult(
        run_id="0f1e2d3c4b5a", package="accelerate", mode="release", status="found",
        reason="0.22.0 is the first bad candidate and 0.21.0 the last good one", criterion=f"{metric} > 1.15625", threshold=1.15625,
        first_bad=Point(ref="0.22.0", date=T0 + dt.timedelta(days=90), value=1.9375, metrics=bm, details=compact_details(bd), **point),
        last_good=Point(ref="0.21.0", date=T0 + dt.timedelta(days=60), value=0.375, metrics=gm, details=compact_details(gd), **point),
        probes_run=15, steps=steps, refine_command="bisector run --package accelerate --mode commits --good 0.21.0"
        " --bad 0.22.0 --repo <REPO>", command="bisector run --package accelerate --good 0.19.0 --bad 0.23.0"
        " --probe ga_memory --metric ga_cost_bytes_per_param --auto --repeats 3",
        decision_rule="3 measurements per candidate, up to 5 while they straddle the threshold; BAD when all are"
                      " beyond the threshold, GOOD when none is, otherwise SKIP (unknown)",
        probe={"probe": "ga_memory", "kind": "built-in", "fingerprint": "fedcba9876543210", "name": "ga_memory",
               "version": "1.0.0", "config_hash": "c0ffee12", "config": {"sizes": [64, 128, 256], "ga": [1, 2],
                                                                         "precisions": ["fp32", "bf16"]}},
        environment={"os": "Linux-6.8-x86_64", "python": "3.11.7", "torch": "2.3.1+cu121", "cuda": "12.1",
                     "gpu": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "meter": "cuda",
                     "transformers": "4.43.4 (last good) / 4.44.0 (first bad)", "env spec": "default"},
        also_changed={"transformers": ["4.43.4", "4.44.0"]},
        log=_log(steps), good_end=Point(ref="0.19.0", value=0.375, metrics=gm, **point),
        bad_end=Point(ref="0.23.0", value=1.9375, metrics=bm, **point))
    for p, transformers in ((r.good_end, "4.40.0"), (r.last_good, "4.43.4"), (r.first_bad, "4.44.0"),
                            (r.bad_end, "4.45.0")):
        p.env = PointEnv.model_validate({**CUDA_ENV, "gpu": "NVIDIA H100 80GB HBM3", "accelerate": p.ref,
                                         "transformers": transformers})
    return r


def undecided() -> BisectResult:
    steps = [_step(0, SHA[1][:10], "good", None, 1, metric=None), _step(1, SHA[9][:10], "bad", None, 9, metric=None),
             _step(2, SHA[5][:10], "skip", None, 5, metric=None, reason="timeout: probe timed out after 60s"),
             _step(3, SHA[6][:10], "skip", None, 6, metric=None, reason="env-failed: build failed"),
             _step(4, SHA[4][:10], "good", None, 4, metric=None), _step(5, SHA[7][:10], "bad", None, 7, metric=None)]
    return BisectResult(
        run_id="777777777777", package="transformers", mode="commit", status="undecided",
        reason=f"all 2 candidates between {SHA[4][:10]} and {SHA[7][:10]} were skipped, so the first bad one is "
               f"any of {SHA[5][:10]}..{SHA[7][:10]}", criterion="probe exit code (0 good, 125 skip, 1-127 bad)",
        first_bad=_commit(7, "Bump deps"), last_good=_commit(4, "Docs"),
        ambiguous=[SHA[5][:10], SHA[6][:10], SHA[7][:10]], probes_run=6, steps=steps,
        command="bisector run --package transformers --mode commits --probe-cmd 'python repro.py'",
        probe={"probe": "cmd: python repro.py", "kind": "command"}, log=_log(steps))


def predates() -> BisectResult:
    steps = [_step(0, "1.4.0", "bad", 400.0, 0, phase="releases", metric="buffer_kib"),
             _step(1, "1.6.0", "bad", 400.0, 2, phase="releases", metric="buffer_kib")]
    widen = "bisector run --package tinypkg --good 1.4 --bad 1.6 --metric buffer_kib --threshold 200 --widen"
    return BisectResult(
        run_id="999999999999", package="tinypkg", mode="release", status="predates-range",
        reason=f"the good endpoint 1.4.0 already measured bad; try an older good, e.g.: {widen}",
        criterion="buffer_kib > 200", metric="buffer_kib", threshold=200.0,
        first_bad=_release("1.4.0", 400.0, "4.29.2"), probes_run=2, steps=steps, widen_command=widen,
        command=widen.removesuffix(" --widen"), log=_log(steps), good_end=_release("1.4.0", 400.0, "4.29.2"),
        bad_end=_release("1.6.0", 400.0, "4.32.0"))


def _release(version: str, kib: float, transformers: str) -> Point:
    return Point(ref=version, kind="release", value=kib, metrics={"buffer_kib": kib},
                 env={"python": "3.11.7", "torch": "2.13.0+cpu", "tinypkg": version, "transformers": transformers,
                      "cpu": "AMD EPYC, 1 threads"})


def no_regression() -> BisectResult:
    steps = [_step(0, "1.0.0", "good", 100.0, 0, phase="releases", metric="buffer_kib"),
             _step(1, "1.3.0", "good", 100.0, 2, phase="releases", metric="buffer_kib")]
    return BisectResult(
        run_id="888888888888", package="tinypkg", mode="release", status="no-regression",
        reason="the bad endpoint 1.3.0 measured good", criterion="buffer_kib > 200", metric="buffer_kib",
        threshold=200.0,
        last_good=_release("1.3.0", 100.0, "4.32.0"), good_end=_release("1.0.0", 100.0, "4.30.0"),
        bad_end=_release("1.3.0", 100.0, "4.32.0"), probes_run=2, steps=steps, log=_log(steps),
        command="bisector run --package tinypkg --good 1.0 --bad 1.3 --metric buffer_kib --threshold 200")


CASES = {"found_commit": found_commit, "release_ga": release_ga, "undecided": undecided, "predates": predates,
         "no_regression": no_regression}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt,render", [("md", render_markdown), ("json", render_json)])
def test_golden(name, fmt, render):
    text = render(CASES[name]())
    path = GOLDEN / f"report_{name}.{fmt}"
    if os.environ.get("UPDATE_GOLDEN") or os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs (UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_result_stored_flat_reads_back_typed_and_renders_the_same(name):
    """A result stored before the facts were typed held each environment as the flat mapping its golden JSON
    shows (keyed as reports name the facts) and its command as one string: it reads back as the typed
    result and renders byte for byte as it did."""
    text = (GOLDEN / f"report_{name}.json").read_text()
    shown, made = json.loads(text), CASES[name]()
    old = {**made.model_dump(mode="json"), "environment": shown["environment"], "command": shown["command"]}
    for key in ("first_bad", "last_good", "good_end", "bad_end"):
        if old.get(key):
            old[key]["env"] = shown[key]["env"]
    stored = BisectResult.model_validate(old)
    assert stored.environment == made.environment and stored.command == mask_words(made.command)   # stored masked
    for key in ("first_bad", "last_good", "good_end", "bad_end"):
        assert getattr(stored, key) is None or getattr(stored, key).env == getattr(made, key).env
    assert render_json(stored) == text and render_markdown(stored) == render_markdown(made)


def test_an_environment_is_typed_in_the_store_and_flat_in_the_report():
    flat_shape = {"python": "3.11.7", "torch": "2.14.0.dev20261004+cpu", "torch from": "a nightly index",
                  "torch git": "b" * 40, "meter": "cpu-dispatch", "numpy": "1.26.4"}
    env = PointEnv.model_validate(flat_shape)
    assert (env.torch_from, env.torch_git, env.meter, env.packages) == ("a nightly index", "b" * 40, "cpu-dispatch",
                                                                        {"numpy": "1.26.4"})
    stored = env.model_dump(mode="json")
    assert "torch from" not in stored and stored["torch_from"] == "a nightly index"
    assert PointEnv.model_validate(stored) == env and flat(env) == flat_shape
    section = RunEnvironment.model_validate({"os": "Linux", **flat_shape, "env spec": "default", "env base": "current"})
    assert (section.os, section.env_spec, section.env_base, section.packages) == ("Linux", "default", "current",
                                                                                 {"numpy": "1.26.4"})
    assert flat(section) == {"os": "Linux", **flat_shape, "env spec": "default", "env base": "current"}
    result = BisectResult(run_id="r", package="torch", mode="nightly", status="undecided", reason="r", criterion="c",
                          environment=section, last_good=Point(ref="1", kind="release", env=env))
    shown = json.loads(render_json(result))
    assert shown["environment"] == flat(section) and shown["last_good"]["env"] == flat_shape


class _Html(HTMLParser):
    """Collects links, tags, table rows and text of rendered markdown."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.tags, self.tables, self.text = [], [], [], []
        self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href"))
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
            self.tables[-1].append(self._row)
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._row.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _html(result: BisectResult) -> _Html:
    """The report as GitHub shows it unfolded: markdown inside ``<details>`` is rendered too (Python-Markdown
    keeps an HTML block raw, so the folds are opened into paragraphs first)."""
    parser = _Html()
    opened = re.sub(r"<details><summary>(.*?)</summary>", r"\1", render_markdown(result)).replace("</details>", "")
    parser.feed(pymd.markdown(opened, extensions=["tables"]))
    return parser


def test_markdown_renders_links_table_and_nothing_injected():
    r = found_commit()
    page = _html(r)
    commit, pr = f"{REPO}/commit/", f"{REPO}/pull/"
    compare = f"{REPO}/compare/{SHA[4]}...{SHA[5]}"
    culprit, last = [commit + SHA[5], pr + "1234"], [commit + SHA[4], pr + "1200"]
    assert page.hrefs == [*culprit, compare, commit + SHA[1], *last, *culprit, commit + SHA[9], *last, *culprit]
    points, commits, steps = page.tables
    assert [row[0] for row in points] == ["", "good endpoint", "last good", "first bad", "bad endpoint"]
    assert points[0] == ["", "accelerate", "peak_bytes", "verdict"] and points[3][1:] == ["5555555555 (#1234)",
                                                                                     "181.00 MiB", "BAD"]
    assert commits[2][-1].replace("\u200b", "") == NASTY and commits[1][3] == "Dev One"
    assert len(steps) - 1 == len(r.steps)
    assert steps[0] == ["#", "phase", "candidate", "date", "peak_bytes", "verdict", "repeats", "seconds", "note"]
    assert steps[1] == ["1", "commits", SHA[1][:10], "2024-03-02", "100.00 MiB", "GOOD", "1", "7.5", ""]
    assert steps[3][-1].replace("\u200b", "") == "crashed: probe exited 1: <b>x</b> | `y` (#77)"
    assert steps[5][-1] == "(stored)" and steps[6][:2] == ["6", "commits:confirm"]
    assert not [t for t, _ in page.tags if t in ("script", "img", "b")]
    assert not [a for _, attrs in page.tags for a in attrs.values() if a and "javascript:" in a.lower()]
    text = "".join(page.text).replace("\u200b", "")
    assert NASTY in text          # shown verbatim, as text
    assert "s3cret" not in render_markdown(r) and "--store" not in render_markdown(r)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_report_renders_to_html(name):
    page = _html(CASES[name]())
    assert page.tables and not [t for t, _ in page.tags if t == "script"]
    assert all(h.startswith("https://") for h in page.hrefs)


def _visible(md: str) -> list[str]:
    return md.split("<details>", 1)[0].splitlines()


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_maintainer_reads_at_most_25_lines_before_the_details_and_no_sentence_twice(name):
    md = render_markdown(CASES[name]())
    head = _visible(md)
    assert len(head) <= 25 and "<details>" in md
    sentences = [s.strip() for line in head for s in line.split(". ") if len(s.strip()) > 20]
    assert len(sentences) == len(set(sentences))
    assert "predates the range" not in md.split("**", 3)[-1].split("\n")[0]   # the verdict says it once


def test_the_table_names_the_endpoints_and_the_boundary_by_their_role():
    roles = {name: [line.split(" | ")[0].lstrip("| ") for line in _visible(render_markdown(CASES[name]()))
                    if line.startswith("| ") and " | `" in line or line.startswith("| ") and "[`" in line]
             for name in CASES}
    assert roles["found_commit"] == ["good endpoint", "last good", "first bad", "bad endpoint"]
    assert roles["no_regression"] == ["good endpoint", "bad endpoint"]    # the bad endpoint is no "last good"
    assert roles["predates"] == ["good endpoint", "bad endpoint"]
    assert roles["undecided"] == ["last good", "first measured bad"]      # a result without endpoints


def test_each_sides_environment_in_one_line_with_the_companions_that_differ():
    head = "\n".join(_visible(render_markdown(predates())))
    assert ("- good endpoint: Python `3.11.7` · torch `2.13.0+cpu` · tinypkg `1.4.0` · transformers `4.29.2` · "
            "CPU `AMD EPYC, 1 threads`") in head
    assert "- bad endpoint: Python `3.11.7` · torch `2.13.0+cpu` · tinypkg `1.6.0` · transformers `4.32.0`" in head
    found = "\n".join(_visible(render_markdown(found_commit())))
    assert "transformers" not in found    # the same on both sides: in the folded "Environment in full"
    assert "GPU `NVIDIA A100-SXM4-80GB, CUDA 12.1, driver 550.54.15` · meter `cuda`" in found
    assert "transformers==4.32.0" in render_markdown(found_commit()).split("Environment in full", 1)[1]


def test_the_verified_repro_is_one_line_and_an_unverified_one_says_so():
    r = found_commit()
    head = _visible(render_markdown(r))
    assert ("**Reproduce:** The attached script `repro.py` reproduces it: 100.00 MiB at last good (GOOD), 181.00 MiB "
            "at first bad (BAD); it needs no bisector (each side's install lines are in its header).") in head
    r.repro.left_out = ["data/ (a directory)"]   # a command run's: what its script could not carry is said
    assert ("it needs no bisector (each side's install lines are in its header), and what it could not carry of the "
            "command's files, put beside it by hand as its header says: `data/ (a directory)`.") in \
        " ".join(render_markdown(r).split())
    assert "left_out" in r.model_dump_json() and "left_out" not in found_commit().model_dump_json()
    r.repro.verified, r.repro.first_bad.verdict = False, Verdict.GOOD
    assert "does not reproduce it: 100.00 MiB at last good (GOOD), 181.00 MiB at first bad (GOOD)" in render_markdown(r)
    r.repro = None
    assert (f"**Reproduce:** `bisector report {r.run_id} --repro repro.py` writes a standalone script and checks it in "
            "two fresh environments made by its install lines; the bisect: `bisector run --package accelerate") in \
        " ".join(render_markdown(r).split())


def test_beyond_githubs_limit_the_details_are_cut_with_a_note_never_the_visible_part():
    r = found_commit()
    r.steps = [r.steps[i % len(r.steps)].model_copy(update={"seq": i}) for i in range(3000)]
    r.log = [f"good commits {i:010d} value=1 (7.5s) # " + "x" * 80 for i in range(3000)]
    md = render_markdown(r)
    assert len(md) <= GITHUB_LIMIT < len(markdown(r, limit=10 ** 9))
    assert _visible(md) == _visible(markdown(r, limit=10 ** 9))
    assert f"lines shown; the full report: `bisector report {r.run_id}`)" in md
    assert md.count("cut to fit GitHub's 65,536-character limit") >= 1 and md.rstrip().endswith("</details>")
    assert len(markdown(found_commit())) < GITHUB_LIMIT and "cut to fit" not in markdown(found_commit())


def test_json_report_is_versioned_with_headline_and_explanation():
    data = json.loads(render_json(release_ga()))
    assert data["schema"] == REPORT_SCHEMA == "bisector.report/2"
    assert data["bisector"] == {"made_by": None, "rendered_by": made_by()} and data["full"] is False
    assert (data["probe_name"], data["probe_version"]) == ("ga_memory", "1.0.0")
    assert data["headline"] == ("First bad: accelerate 0.22.0 — GA cost rose from 0.375 B/param to 1.938 B/param: "
                                "the bf16 GA=1 peak fell (-1.562 B/param), the bf16 GA=2 peak did not change; "
                                "no peak rose (last good: 0.21.0)")
    assert data["explanation"][0].startswith("GA cost rose by 1.562 B/param because the bf16 GA=1 peak fell by "
                                             "1.562 B/param")
    assert data["explanation"][0].endswith("; the bf16 GA=2 peak did not change.")
    assert "details" not in data["first_bad"] and "metrics" not in data["steps"][0]
    assert set(data["first_bad"]["metrics"]) == {"ga_cost_bytes_per_param", "ga_excess_bytes_per_param",
                                                 "fp32_ga_cost_bytes_per_param", "mixed_cost_bytes_per_param",
                                                 "fit_r2_min"}
    full = json.loads(render_json(release_ga(), full=True))
    assert full["full"] is True and BisectResult.model_validate(full).first_bad.details["cells"]
    assert len(full["first_bad"]["metrics"]) == len(release_ga().first_bad.metrics)
    assert json.loads(render_json(predates()))["explanation"] == []


def _ga_result(good_slopes: dict, bad_slopes: dict, metric: str) -> BisectResult:
    r = release_ga()
    (gm, gd), (bm, bd) = ga_side(good_slopes, "m0.backward"), ga_side(bad_slopes, "m0.backward")
    r.metric, r.criterion = metric, f"{metric} > 0.5"
    r.last_good = r.last_good.model_copy(update={"metrics": gm, "details": compact_details(gd), "value": gm[metric]})
    r.first_bad = r.first_bad.model_copy(update={"metrics": bm, "details": compact_details(bd), "value": bm[metric]})
    return r


def test_the_verdict_says_no_peak_rose_when_a_derived_cost_rose_because_peaks_fell():
    """The #2472 case: GA excess 0.000 -> 1.244 B/param because the GA=1 peaks fell (bf16 -1.896, fp32
    -0.652 B/param) and the GA=2 peaks held; every visible headline says so, not only the Why block."""
    bad = {**GOOD_SLOPES, ("bf16", 1): GOOD_SLOPES[("bf16", 1)] - 1.896, ("fp32", 1): GOOD_SLOPES[("fp32", 1)] - 0.652}
    r = _ga_result(GOOD_SLOPES, bad, "ga_excess_bytes_per_param")
    said = ("GA excess rose from 0.000 B/param to 1.244 B/param: the GA=1 peaks fell (bf16 -1.896 B/param, fp32 "
            "-0.652 B/param), the GA=2 peaks did not change; no peak rose")
    md = render_markdown(r)
    assert said in md.split("<details>")[0].splitlines()[0]
    assert said in render_text(r).splitlines()[0]
    assert said in json.loads(render_json(r))["headline"]
    # a cost that rose because a peak rose says that, and no "no peak rose"
    worse = {**GOOD_SLOPES, ("bf16", 2): GOOD_SLOPES[("bf16", 2)] + 1.5}
    line = render_text(_ga_result(GOOD_SLOPES, worse, "ga_excess_bytes_per_param")).splitlines()[0]
    assert "the bf16 GA=2 peak rose (+1.500 B/param)" in line and "no peak" not in line
    # a peak metric itself is not derived: nothing is added
    peak = "peak_bytes.bf16.ga2.h256"
    line = render_text(_ga_result(GOOD_SLOPES, worse, peak)).splitlines()[0]
    assert line.split(" — ", 1)[1].split(" (last good")[0].count(":") == 0


def test_old_stored_results_still_load_and_render():
    data = json.loads(found_commit().model_dump_json())
    for step in data["steps"]:
        del step["date"]
    for side in ("first_bad", "last_good"):
        del data[side]["details"]
    del data["decision_rule"]
    old = BisectResult.model_validate(data)
    assert "**First bad: accelerate" in render_markdown(old) and render_text(old).startswith("First bad:")


def test_explanation_names_phases_and_unchanged_peaks():
    (gm, gd), (bm, bd) = ga_side(GOOD_SLOPES, "m0.backward"), ga_side(BAD_SLOPES, "m0.step")
    lines = explain(gm, bm, "ga_cost_bytes_per_param", gd, bd)
    assert "Other peaks: the fp32 GA=1 and fp32 GA=2 peaks did not change." in lines
    assert any(s.startswith("The bf16 GA=1 step at h256 peaks in m0.backward on the last good") and
               "but in m0.step on the first bad" in s for s in lines)
    assert any(s.startswith("The bf16 GA=2 step at h256 peaks in m1.backward on both sides") for s in lines)
    excess = explain(gm, bm, "ga_excess_bytes_per_param")
    assert excess[0].endswith("the bf16 GA=2, fp32 GA=1 and fp32 GA=2 peaks did not change.")
    assert metric_label("peak_bytes.bf16.ga2.h256") == "bf16 GA=2 peak at h256"
    assert metric_label("fp32_ga_cost_fixed_bytes") == "fp32 GA cost (fixed part)"


def test_explanation_generic_ranks_by_relative_change():
    good = {"peak": 100.0, "a": 10.0, "b": 1.0, "c": 5.0, "d": 7.0}
    bad = {"peak": 300.0, "a": 11.0, "b": 4.0, "c": 5.0, "d": 7.0}
    assert explain(good, bad, "peak") == ["Moved with it: b 1 → 4, +300%; a 10 → 11, +10%.",
                                          "c and d did not change."]
    assert explain(good, bad, "peak", {"peak_phase": "backward"}, {"peak_phase": "step"})[-1] == \
        "The peak moved from phase backward (last good) to phase step (first bad)."
    assert explain({}, bad, "peak") == []


def test_environment_sides_merge_and_differences_show():
    good = PointEnv(torch="2.3", packages={"transformers": "4.30.2"})
    bad = PointEnv(torch="2.3", packages={"transformers": "4.31.0"})
    assert merge_sides(good, bad) == \
        PointEnv(torch="2.3", packages={"transformers": "4.30.2 (last good) / 4.31.0 (first bad)"})


def test_reproduce_command_drops_local_flags_and_credentials():
    cmd = "bisector run --store=/x/s.db --cache-dir /c --json --index-url https://u:p@h/simple --good 1"
    assert shown_command(shlex.split(cmd)) == "bisector run --index-url 'https://***@h/simple' --good 1"


@pytest.fixture
def stored(tmp_path):
    store = Store(tmp_path / "s.db")
    for r in (found_commit(), undecided()):
        store.put_run(RunRow(id=r.run_id, created=now(), updated=now(), kind="bisect", command=["bisector", "run"],
                             config={"job": {"package": r.package, "good": "g", "bad": "b"}}, status=r.status,
                             result=r.model_dump(mode="json")))
        for s in r.steps:
            store.add_step(StepRow(run_id=r.run_id, seq=s.seq, candidate=f"{s.phase} {s.candidate}",
                                   verdict=s.verdict, value=s.value, reason=s.reason, seconds=s.seconds,
                                   measurements=["k"] * s.repeats))
    return str(tmp_path / "s.db")


def test_report_log_and_runs_commands(stored, capsys):
    assert main(["runs", "--store", stored]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["run", "config", "updated", "kind", "status", "what"]     # a header,
    assert [line.split()[0] for line in listing[1:-1]] == ["a1b2c3d4e5f6", "777777777777"]
    assert len({line.index("bisect") for line in listing[1:-1]}) == 1                       # aligned columns,
    assert listing[-1] == "2 run(s): 2 bisect"                                              # a total
    assert main(["log", "a1b2", "--store", stored]) == 0
    log = capsys.readouterr().out
    assert f"skip commits {SHA[5][:10]} (7.5s) # crashed: probe exited 1" in log
    assert f"bad commits:confirm {SHA[5][:10]} value=1.89792e+08 repeats=3 (7.5s)" in log
    assert main(["report", "7777", "--format", "json", "--store", stored]) == 0
    assert json.loads(capsys.readouterr().out)["ambiguous"] == [SHA[5][:10], SHA[6][:10], SHA[7][:10]]
    assert main(["report", "--format", "text", "--store", stored]) == 0
    assert capsys.readouterr().out.startswith("Undecided for transformers")
    assert main(["report", "a1b2c3d4e5f6", "--store", stored]) == 0
    assert capsys.readouterr().out.startswith("**First bad: accelerate [`5555555555`]")


def test_runs_prints_every_time_in_one_format(stored, capsys):
    store = Store(Path(stored))
    for rid, stamp in (("8888aaaa0000", "2026-12-02T14:18:55.340150+00:00"), ("8888bbbb0000", "2026-12-02T16:18:55+02:00"),
                       ("8888cccc0000", "2026-12-02T14:18:55Z")):
        store.put_run(RunRow(id=rid, created=stamp, updated=stamp, kind="probe", command=["bisector", "probe"],
                             config={"package": "p", "version": "1"}, status="ok", result={}))
    assert main(["runs", "--kind", "probe", "--store", stored]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert [r[2] for r in rows] == ["2026-12-02T14:18:55Z"] * 3


def test_log_and_report_without_an_id_show_the_latest_bisect_and_say_which(stored, capsys):
    store = Store(Path(stored))
    store.put_run(RunRow(id="9999aaaa0000", created=now(), updated=now(), kind="probe", command=["bisector", "probe"],
                         config={"package": "accelerate", "version": "0.28.0"}, status="crashed",
                         result={"package": "accelerate", "version": "0.28.0", "measurement": "nope"}))
    assert main(["log", "--store", stored]) == 0                  # a later crashed probe is not what log shows
    out, err = capsys.readouterr()
    assert out.startswith("# bisector run 777777777777: transformers good=g bad=b\n")
    assert err == "bisector: run 777777777777, the latest finished bisect run (transformers g..b; `bisector runs` lists them all)\n"
    assert main(["log", "--kind", "probe", "--store", stored]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# bisector probe 9999aaaa0000") and "the latest finished probe run" in err
    assert main(["log", "9999", "--store", stored]) == 0 and capsys.readouterr().err == ""   # named: nothing said


def test_allocation_sites_compare_without_line_numbers():
    good, bad = by_site(GOOD_SITES), by_site(BAD_SITES)
    assert "(7 other sites)" not in good and good["float32 ToCopyBackward0 | accelerate/accelerator.py backward"] == 3 * MIB
    [sentence] = site_sentence(good, bad)
    assert sentence.startswith("At each side's peak, by allocation site (line numbers dropped): float32 AccumulateGrad "
                               "from accelerate/accelerator.py backward rose by 2.00 MiB (0 B → 2.00 MiB); bfloat16 from "
                               "transformers/models/gpt_neox/modeling_gpt_neox.py forward fell by 1.00 MiB")
    assert sentence.endswith("; unchanged: tensors from before the meter started (parameters, buffers) at 4.00 MiB, "
                             "float32 ToCopyBackward0 from accelerate/accelerator.py backward at 3.00 MiB.")
    assert site_sentence(good, good) == [] and by_site("garbage") == {}
    (gm, gd), (bm, bd) = ga_side(GOOD_SLOPES, "m0.backward", GOOD_SITES), ga_side(BAD_SLOPES, "m0.step", BAD_SITES)
    assert sentence in explain(gm, bm, "ga_cost_bytes_per_param", compact_details(gd), compact_details(bd))


def test_the_json_of_a_16_step_ga_memory_run_stays_under_50_kb_and_full_keeps_everything():
    r = release_ga()
    sizes = {64: 120_000, 128: 400_000, 192: 800_000, 256: 1_450_000}
    metrics = {f"phase_peak_bytes.{p}.ga{g}.h{h}.{ph}": 1.0e6 for p in ("fp32", "bf16") for g in (1, 2)
               for h in sizes for ph in ("forward", "backward", "step", "zero_grad")}
    metrics.update({f"peak_bytes.{p}.ga{g}.h{h}": 2.0e6 for p in ("fp32", "bf16") for g in (1, 2) for h in sizes})
    r.steps = [s.model_copy(update={"seq": i, "metrics": {**metrics, **r.first_bad.metrics}})
               for i, s in enumerate(r.steps * 4)][:16]
    sites = {f"float32 Node{i} | pkg/module_{i}.py forward": 1000.0 * i for i in range(12)}
    cells = [{"hidden": h, "precision": p, "ga": g, "peak_bytes": 2.0e6, "peak_phase": "m0.backward",
              "phases": {f"m{i}.{ph}": 1.0e6 for i in range(g) for ph in ("forward", "backward", "step")},
              "sites": sites, "phase_sites": {ph: sites for ph in ("forward", "backward", "step")}}
             for h in sizes for p in ("fp32", "bf16") for g in (1, 2)]
    for p in (r.first_bad, r.last_good, r.good_end, r.bad_end):
        p.metrics, p.details = {**metrics, **p.metrics}, {"cells": cells}
    compact, full = render_json(r), render_json(r, full=True)
    assert len(compact.encode()) < 50_000 < len(full.encode())
    assert json.loads(full)["steps"][0]["metrics"] == r.steps[0].metrics
