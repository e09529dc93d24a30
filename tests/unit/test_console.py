"""The console: lines wrapped to the terminal (100 columns in a log), a heartbeat while a probe runs in
a log, and no line said twice (notes printed live are not printed again in the final report)."""
from __future__ import annotations

import shlex
import io
import threading
import time

from bisector.console import activity
from bisector.console.activity import Activity
from bisector.core.result import BisectResult
from bisector.console.live import PlainProgress
from bisector.console.progress import LOG_WIDTH, PrintHandler, console_width, wrapped
from bisector.report.text import render_text


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_heartbeat_every_10_s_of_a_probe_with_its_cell():
    out, clock = io.StringIO(), Clock()
    plain = PlainProgress(out, heartbeat_s=10, clock=clock)
    act = Activity(1, "accelerate 0.28.0", "measure")
    plain.opened(act)
    for detail in ("environment", "resolving/installing", "probe"):
        act.detail = detail
        plain.changed(act)
    assert out.getvalue() == "  building the environment of accelerate 0.28.0\n"
    act.detail = "[ga_memory] cell 3/8 h128 t8 bf16 ga2: 1.2 MiB"
    plain.changed(act)
    for t in (5, 9.9):
        clock.now = t
        plain.tick()
    assert out.getvalue().count("probing") == 0
    clock.now = 10
    plain.tick()
    clock.now = 15
    plain.tick()
    act.detail = "[ga_memory] cell 4/8 h128 t8 fp32 ga1: 1.0 MiB"
    clock.now = 20.5
    plain.tick()
    beats = [line for line in out.getvalue().splitlines() if "probing" in line]
    assert beats == ["  probing accelerate 0.28.0: 10 s, cell 3 of 8", "  probing accelerate 0.28.0: 20 s, cell 4 of 8"]
    plain.closed(act)
    clock.now = 40
    plain.tick()
    assert out.getvalue().count("probing") == 2   # nothing once it ended


def test_a_build_gets_a_heartbeat_too_and_two_threads_never_share_a_line():
    out, clock = io.StringIO(), Clock()
    plain = PlainProgress(out, heartbeat_s=10, clock=clock)
    act = Activity(2, "accelerate 0.27.0", "measure")
    plain.opened(act)
    for detail in ("environment", "creating the torch base venv", "installing torch==2.13.0+cpu into the base",
                   "Collecting sympy"):
        act.detail = detail
        plain.changed(act)
    assert out.getvalue() == ""                      # the torch base's own log line says it starts
    clock.now = 10
    plain.tick()
    act.detail = "resolving/installing"
    plain.changed(act)
    clock.now = 21
    plain.tick()
    act.detail = "probe"
    plain.changed(act)
    clock.now = 31.5
    plain.tick()
    assert out.getvalue().splitlines() == ["  building the environment of accelerate 0.27.0: 10 s",
                                           "  building the environment of accelerate 0.27.0",
                                           "  building the environment of accelerate 0.27.0: 21 s",
                                           "  probing accelerate 0.27.0: 10 s"]

    class Slow(io.StringIO):   # a stream that lets another thread in between two writes
        def write(self, text):
            for ch in text:
                super().write(ch)
                time.sleep(0)
            return len(text)
    slow = Slow()
    lines = PlainProgress(slow)
    threads = [threading.Thread(target=lambda n=n: [lines.print(f"line {n} " + "x" * 40) for _ in range(20)])
               for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(slow.getvalue().splitlines())) == [f"line {n} " + "x" * 40 for n in range(2)]


def test_the_heartbeat_runs_on_its_own_in_a_log():
    out = io.StringIO()
    with PlainProgress(out, heartbeat_s=0.05) as plain:
        activity.set_listener(plain)
        try:
            with activity.doing("tinypkg 1.0.0", kind="measure"):
                activity.update("probe")
                for _ in range(3000):   # the heartbeat thread's own pace: waited for, not timed
                    if "probing tinypkg 1.0.0" in out.getvalue():
                        break
                    time.sleep(0.01)
        finally:
            activity.set_listener(None)
    assert "  probing tinypkg 1.0.0: 0 s" in out.getvalue()


def test_lines_wrap_to_the_width_with_their_indent_and_never_break_a_word():
    text = "why: " + "word " * 30 + "https://example.org/" + "x" * 120
    lines = wrapped(text, 60).splitlines()
    assert all(len(line) <= 60 for line in lines[:-1]) and lines[-1] == "  https://example.org/" + "x" * 120
    assert wrapped("  " + "a " * 50, 40).splitlines()[1].startswith("    a")
    assert console_width(io.StringIO()) == LOG_WIDTH == 100


def test_step_and_note_lines_in_a_log_are_at_most_100_columns():
    out = io.StringIO()
    PrintHandler(stream=out).note("also changed: transformers; measuring which change explains the step " * 4)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 100


def test_notes_printed_while_the_run_went_are_not_printed_again():
    r = BisectResult(run_id="r1", package="p", mode="release", status="undecided", reason="x", criterion="c",
                     notes=["v1 is not an ancestor of v2: bisecting from their merge-base abc"])
    assert "note: v1 is not an ancestor" in render_text(r)
    assert "note:" not in render_text(r, notes_shown=True)


def test_an_attribution_environment_is_named_with_its_pins(tmp_path):
    from bisector.envs import EnvManager, EnvSpec
    from bisector.measure.executors import LocalExecutor
    from bisector.measure.gpus import GpuPool
    from bisector.measure.measurers import Measurers
    from bisector.job.probe import ExitCodeProbe
    from bisector.store.storage import Store

    envs = EnvManager(tmp_path / "cache")
    plain = Measurers(Store(tmp_path / "s.db"), envs, EnvSpec(name="plain"), ExitCodeProbe(cmd="true"),
                      LocalExecutor(envs, GpuPool([])))
    assert plain("r1").tag == ""   # "building the environment of accelerate 0.28.0"
    assert plain.pinned({"transformers": "4.37.2"})("r1").tag == " + transformers==4.37.2"


def test_a_command_to_copy_is_never_wrapped():
    r = BisectResult(run_id="r1", package="p", mode="release", status="found", reason="x", criterion="c",
                     refine_command="bisector run --package p --mode commits --good 1.3.0 --bad 1.4.0 " + "--x y " * 20)
    text = wrapped(render_text(r), 60)
    assert "    " + shlex.join(r.refine_command) in text.splitlines()
