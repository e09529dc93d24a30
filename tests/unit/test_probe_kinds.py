"""A probe's kind is one class (bisector/job/probe/): chosen by the key a table gives, written back in the stored
shape key for key, so runs stored before the kinds were classes keep their config hash (and resume); and no code
outside the package asks which kind it holds."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from bisector.core.default_rule import chosen_rule
from bisector.core.criterion import Compare
from bisector.errors import UsageError
from bisector.job.config import JobConfig
from bisector.job.probe import (BuiltinProbe, ExitCodeProbe, ProgramProbe, ScriptProbe, is_program, kind_of,
                                probe_from, raw_label)
from bisector.store.run_record import config_hash

ROOT = Path(__file__).resolve().parents[2]
STORED = json.loads((ROOT / "tests/fixtures/stored_runs/configs_before_probe_kinds.json").read_text())
CLASSES = {"builtin": BuiltinProbe, "script": ScriptProbe, "exit_code": ExitCodeProbe, "program": ProgramProbe}


@pytest.mark.parametrize("kind", sorted(STORED))
def test_a_job_stored_before_the_kinds_were_classes_reads_back_with_its_config_hash(kind):
    stored = STORED[kind]
    config = JobConfig.model_validate(stored["config"])
    assert type(config.probe) is CLASSES[kind] and kind_of(stored["config"]["probe"]) == kind
    assert config.model_dump_json(exclude={"run"}) == stored["dump"]
    assert config_hash(config) == stored["config_hash"]   # the same command finds the stopped run; --resume too


@pytest.mark.parametrize("table, cls", [
    ({"name": "ga_memory"}, BuiltinProbe), ({"path": "p.py"}, ScriptProbe), ({"cmd": "true"}, ExitCodeProbe),
    ({"command": ["python", "t.py"]}, ProgramProbe),
    ({"name": "command", "command": ["python", "t.py"], "path": None, "cmd": None}, ProgramProbe),
])
def test_the_key_a_table_gives_picks_the_kind_and_the_stored_shape_comes_back(table, cls):
    probe = probe_from(table)
    assert type(probe) is cls and probe_from(probe.model_dump(mode="json")) == probe
    assert list(probe.model_dump()) == ["name", "path", "cmd", "command", "measure_skip", "meter", "cwd", "args",
                                        "timeout"]


@pytest.mark.parametrize("table, message", [
    ({}, "give exactly one of name, path, cmd, command"),
    ({"name": "ga_memory", "cmd": "true"}, "give exactly one of name, path, cmd, command (got name, cmd)"),
    ({"cmd": "true", "measure_skip": 2}, "--measure-skip, --meter and --fake (measure_skip, meter, fake) are for a"),
    ({"name": "ga_memory", "fake": True}, "--measure-skip, --meter and --fake (measure_skip, meter, fake) are for a"),
    ({"name": "command"}, "the command probe measures a program: give it after --"),
    ({"command": ["python", "t.py"], "args": ["x"]}, "a command (-- CMD) takes no probe arguments"),
    ({"path": "p.py", "timeout": 0}, "timeout must be positive"),
])
def test_a_table_that_is_no_one_kind_is_refused_in_its_words(table, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        probe_from(table)


def test_each_kind_answers_the_protocol_for_itself(tmp_path):
    program = ProgramProbe(command=["python", "t.py"], cwd=tmp_path)
    assert program.default_metric == "step_peak_bytes" and program.label() == "your program: python t.py"
    assert program.known_metric("no_such_metric") and program.known_metric("step_peak_bytes.rank1") is None
    assert program.program_words() == ["--", "python", "t.py"] and not program.warm_capable
    assert BuiltinProbe(name="ga_memory").default_metric == "ga_excess_bytes_per_param"
    assert BuiltinProbe(name="ga_memory").warm_capable and BuiltinProbe(name="x").known_metric("anything") is None
    exit_code = ExitCodeProbe(cmd="sh t.sh")
    assert exit_code.judged_by_exit_code and exit_code.label() == "exit-code command: sh t.sh"
    assert exit_code.default_metric is None and exit_code.argv(Path("python")) == ["sh", "t.sh"]
    assert ScriptProbe(path=tmp_path / "p.py").short_label() == "p.py"
    assert raw_label({"cmd": "true"}) == "exit-code command: true" and is_program({"command": ["x"]})


def _job(tmp_path, **criterion):
    return JobConfig.model_validate({"job": {"package": "p", "good": "1", "bad": "2"},
                                     "probe": {"command": ["python", "t.py"], "cwd": str(tmp_path)},
                                     "criterion": criterion})


def test_a_program_run_without_a_rule_gets_its_metrics_default_rule_and_says_so(tmp_path):
    memory = _job(tmp_path).criterion
    assert memory.metric == "step_peak_bytes" and memory.max_increase == "10%"
    assert chosen_rule(memory).startswith("no rule given: step_peak_bytes (memory) is BAD when it rises more than 10%")
    time = _job(tmp_path, metric="step_seconds").criterion
    assert time.compare is Compare.STATS and "(time) is judged by its samples" in chosen_rule(time)
    given = _job(tmp_path, threshold=5.0).criterion
    assert given.threshold == 5.0 and chosen_rule(given) is None
    with pytest.raises(UsageError, match=r"^no rule for optimizer_steps: give --threshold X"):
        _job(tmp_path, metric="optimizer_steps")


@pytest.mark.parametrize("metric", ["loss_first", "grad_norm_last.rank1", "update_norm_last"])
def test_a_number_the_program_computes_gets_no_default_rule_and_the_refusal_offers_max_change(tmp_path, metric):
    with pytest.raises(UsageError, match=rf"^no rule for {re.escape(metric)}: a number the program computes has no "
                                         r"default rule .*: give --max-change X or X% \(BAD when it moves"):
        _job(tmp_path, metric=metric)
    given = _job(tmp_path, metric=metric, max_change="1%").criterion
    assert given.max_change == "1%" and chosen_rule(given) is None
    with pytest.raises(UsageError, match=r"^no rule for nonfinite_steps: give --threshold X"):   # a count: as before
        _job(tmp_path, metric="nonfinite_steps")


def test_crash_is_bad_without_a_rule_asks_where_the_program_starts_to_fail(tmp_path):
    crit = _job(tmp_path, crash_is_bad=True).criterion
    assert crit.metric is None and crit.crash_is_bad and chosen_rule(crit) is None


KIND_BRANCH = re.compile(r'(probe|spec)\.(cmd|command)\b|\.get\("(cmd|command)"\)|(probe|spec)\.name (==|is|in) |'
                         r'not (probe|spec)\.(cmd|command)')


def test_no_code_outside_the_probe_package_asks_which_kind_it_holds():
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "bisector").rglob("*.py")
             if "job/probe/" not in p.as_posix() for i, line in enumerate(p.read_text().splitlines(), 1)
             if KIND_BRANCH.search(line)]
    assert found == []


def test_a_programs_inputs_are_in_its_key_and_its_outputs_are_not(tmp_path):
    """A config file or a tokenizer directory the words name is part of the key (change it: measured again, in a
    new run); where the program writes (--output_dir, -o, --logging_dir=...) is not, and one run keeps one key."""
    from bisector.job.probe.program_inputs import _inputs_digest

    (tmp_path / "conf.json").write_text("{}")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.json").write_text("{}")
    (tmp_path / "out").mkdir()
    words = ["python", "train.py", "--config", "conf.json", "--tokenizer=tok", "--output_dir", "out", "-o", "out",
             "--logging_dir=out"]
    probe = ProgramProbe(command=words, cwd=tmp_path)

    def key():
        _inputs_digest.cache_clear()   # (a new bisector process)
        return probe.fingerprint()

    first = key()
    (tmp_path / "out" / "checkpoint-1").write_text("written by the program")
    assert key() == first
    (tmp_path / "tok" / "vocab.json").write_text('{"a": 0}')
    changed = key()
    assert changed != first
    (tmp_path / "conf.json").write_text('{"lr": 1}')
    assert key() != changed
    again = probe.fingerprint()
    (tmp_path / "conf.json").write_text('{"lr": 2}')
    assert probe.fingerprint() == again   # within one run, the key it started with
