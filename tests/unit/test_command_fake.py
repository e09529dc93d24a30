"""``bisector run ... --fake -- CMD`` (issue 48 item 6): the flag becomes the program kind's ``fake``, travels to the
meter (its arguments and the measurement's key), keeps other jobs' stored shape and hash, is refused where it means
nothing, and a measurement whose program read a value fake mode could not answer is bad input in one line."""
from __future__ import annotations

import pytest

from bisector.cli.main import main
from bisector.core.facts import ProbeResult
from bisector.core.measurement import Measurement, Status
from bisector.job.jobfile import load_config
from bisector.job.probe import ProgramProbe

RANGE = ["run", "--package", "transformers", "--good", "4.36.0", "--bad", "4.38.2"]
REFUSED = ("fake mode cannot read the value of a float32 scalar tensor (a data-dependent branch or .item()) at "
           "train.py:16 <module>: this step cannot be measured fake")


def _job(tmp_path, **probe):
    return load_config(None, {"job": {"package": "transformers", "good": "4.36.0", "bad": "4.38.2"},
                              "probe": {"command": ["python", "train.py"], "cwd": str(tmp_path), **probe},
                              "criterion": {"max_increase": "10%"}})


def test_fake_is_the_meter_s_flag_part_of_the_key_and_said_again_in_follow_up_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain, fake = _job(tmp_path).probe, _job(tmp_path, fake=True).probe
    assert isinstance(fake, ProgramProbe) and fake.fake and not plain.fake
    assert fake.meter_args() == ["--measure-skip", "1", "--meter", "tensors", "--fake"]
    assert plain.meter_args() == ["--measure-skip", "1", "--meter", "tensors"]
    assert fake.fingerprint() != plain.fingerprint()            # a fake measurement is never a real one's
    assert fake.flag_words() == ["--fake"] and plain.flag_words() == []
    # the stored shape: written only where set, so every job stored before keeps its config hash
    assert "fake" not in plain.model_dump() and fake.model_dump()["fake"] is True
    assert ProgramProbe.model_validate(fake.model_dump()).fake is True


def test_the_flag_reaches_the_job_from_the_command_line(tmp_path, monkeypatch):
    from bisector.cli.main import _parse
    from bisector.cli.overrides import run_job

    monkeypatch.chdir(tmp_path)
    args = _parse([*RANGE, "--max-increase", "10%", "--fake", "--", "python", "train.py"])
    assert run_job(None, args).probe.fake is True
    args = _parse([*RANGE, "--max-increase", "10%", "--", "python", "train.py"])
    assert run_job(None, args).probe.fake is False


@pytest.mark.parametrize("argv, said", [
    (["--fake"], "for a program given after --"),                                  # the default job's built-in probe
    (["--fake", "--meter", "rss", "--", "python", "train.py"], "not --meter rss"),
    (["--fake", "--metric", "loss_first", "--max-change", "1%", "--", "python", "train.py"], "carry no values"),
])
def test_fake_where_it_means_nothing_is_one_line_exit_2(capsys, tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert main([*RANGE, "--store", str(tmp_path / "s.db"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "Traceback" not in err
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "cache").exists()


def test_a_value_read_fake_mode_refused_is_bad_input_naming_the_line(tmp_path):
    probe = ProgramProbe(command=["python", "train.py"], cwd=tmp_path, fake=True)
    result = ProbeResult.read({"schema_version": "command/1", "metrics": {}, "error": REFUSED, "fake_refused": REFUSED,
                               "meter": "cpu-dispatch (fake)"})
    m = Measurement(key="k", package="transformers", candidate="4.38.0", env_fingerprint="e", probe_fingerprint="f",
                    status=Status.CRASHED, seconds=1.0, result=result)
    assert probe.bad_input(m) == (f"--fake: {REFUSED} (at 4.38.0); the program reads a tensor's value, which fake "
                                  "tensors do not have: run it without --fake")
    ok = m.model_copy(update={"status": Status.OK, "result": ProbeResult.read({"metrics": {"step_peak_bytes": 1.0}})})
    assert probe.bad_input(ok) is None


def test_fake_where_the_run_measures_on_cuda_is_refused_before_anything_is_built(tmp_path):
    from bisector.errors import UsageError

    probe = ProgramProbe(command=["python", "train.py"], cwd=tmp_path, fake=True)
    probe.check("cpu")
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES= to measure on the CPU"):
        probe.check("cuda")
    ProgramProbe(command=["python", "train.py"], cwd=tmp_path).check("cuda")


def test_a_fake_measurement_says_its_bytes_are_fake_and_where_the_program_stopped():
    from bisector.explain.command_run import CommandExplainer

    e = CommandExplainer()
    stopped = f"after 4 optimizer steps (those it finished are measured): {REFUSED}"
    fake = e.compact({"schema_version": "command/1", "meter": "cpu-dispatch (fake)", "metrics": {}, "steps": [],
                      "fake_stopped": stopped})
    assert fake["fake"] is True and fake["fake_stopped"] == stopped
    lines = e.one_version({}, fake, None)
    assert lines == ["Fake mode: the program ran on fake tensors (nothing allocated); its bytes are the fake tensors' "
                     "live bytes.", f"Fake mode stopped the program {stopped}."]
    said = e.explain({"step_peak_bytes": 1.0}, {"step_peak_bytes": 2.0}, "step_peak_bytes", fake, fake)
    assert said[-3:] == ["Fake mode: both sides ran on fake tensors (nothing allocated); the bytes are the fake tensors' "
                         "live bytes.", f"Last good: fake mode stopped the program {stopped}.",
                         f"First bad: fake mode stopped the program {stopped}."]
    real = e.compact({"schema_version": "command/1", "meter": "cpu-dispatch", "metrics": {}, "steps": []})
    assert "fake" not in real and not any("Fake" in x for x in e.explain({"a": 1.0}, {"a": 2.0}, "a", real, real))
