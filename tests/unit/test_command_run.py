"""``bisector run ... -- CMD``: the interface, the job it becomes, its refusals, its fingerprint, its repro,
and the pure parts of the command meter (its records turned into metrics)."""
from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

from bisector.bisection.phase import inside_spread
from bisector.repro.probe_view import meter_probe_files
from bisector.repro.embed import files_dict
from bisector.cli.main import main
from bisector.core.criterion import Criterion, calibrate
from bisector.core.units import human_value
from bisector.data import probes_dir
from bisector.job.jobfile import load_config
from bisector.job.probe.program_metrics import metric_names, unknown_metric
from bisector.job.probe import ProgramProbe
from bisector.job.probe.program_inputs import _inputs_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "probes" / "command"))
from _aggregate import METRICS, read_processes, summarize  # noqa: E402
from _records import encode  # noqa: E402

KEY = b"k" * 16
COMMAND_FILES = ("__main__", "_aggregate", "_fake", "_fake_stop", "_inprocess", "_launch", "_numerics", "_package_dirs",
                 "_parts", "_records", "_sites", "_step_numbers", "_torch_hook", "_update_copy")

RANGE = ["run", "--package", "transformers", "--good", "4.36.0", "--bad", "4.38.2"]


def _refused(capsys, tmp_path, monkeypatch, *argv) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert main([*RANGE, "--store", str(tmp_path / "s.db"), *argv]) == 2
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "cache").exists()   # nothing created
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv, said", [
    (["--"], "no command after --"),
    (["--probe", "ga_memory", "--", "python", "train.py"], "without --probe"),
    (["--probe-cmd", "true", "--", "python", "train.py"], "without --probe-cmd"),
    (["--measure-skip", "-1", "--", "python", "train.py"], "measure_skip must be >= 0"),
    (["--measure-skip", "2"], "for a program given after --"),
    (["--meter", "rss"], "for a program given after --"),
    (["--", "", "x"], "an empty word"),
    (["--", "./missing.sh"], "not an executable file"),
])
def test_bad_command_runs_are_one_line_exit_2_and_create_nothing(capsys, tmp_path, monkeypatch, argv, said):
    assert said in _refused(capsys, tmp_path, monkeypatch, *argv)


def test_only_run_probe_and_diff_take_a_command(capsys):
    assert main(["log", "--", "python", "x.py"]) == 2
    assert "log takes no command after --" in capsys.readouterr().err


def test_the_command_becomes_the_job_with_its_default_metric(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(None, {"job": {"package": "transformers", "good": "4.36.0", "bad": "4.38.2"},
                                "probe": {"command": ["python", "train.py"], "cwd": str(tmp_path)},
                                "criterion": {"max_increase": "10%"}})
    probe = config.probe
    assert isinstance(probe, ProgramProbe) and probe.command == ["python", "train.py"] and probe.workdir == tmp_path
    assert config.criterion.metric == "step_peak_bytes" and config.reference is None   # the default job's is gone
    assert probe.args == [] and probe.label() == "your program: python train.py"
    argv = probe.argv(Path("/env/bin/python"))
    assert argv[1].endswith("command/__main__.py") and argv[-3:] == ["--", "python", "train.py"]


def test_a_job_file_can_name_the_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bisect.toml").write_text('[job]\npackage = "transformers"\ngood = "4.36.0"\nbad = "4.38.2"\n'
                                          '[probe]\ncommand = ["python", "train.py", "--steps", "4"]\n'
                                          'measure_skip = 2\n[criterion]\nmetric = "rss_peak_bytes"\n'
                                          'max_increase = "10%"\n')
    config = load_config(tmp_path / "bisect.toml", {})
    assert config.probe.command[-1] == "4" and config.probe.measure_skip == 2
    assert config.probe.meter_args() == ["--measure-skip", "2", "--meter", "tensors"]


def test_the_fingerprint_holds_the_script_the_command_names(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    spec = ProgramProbe(command=["python", "train.py"], cwd=tmp_path)
    before = spec.fingerprint()
    script.write_text("print(2)\n")
    _inputs_digest.cache_clear()   # (the next bisector process)
    assert spec.fingerprint() != before                       # an edited script is measured again
    assert ProgramProbe(command=["python", "train.py"], cwd=tmp_path, measure_skip=2).fingerprint() != spec.fingerprint()


def test_metric_names_come_from_the_meter_and_ranks_are_names_too():
    assert metric_names() == list(METRICS) and metric_names()[0] == "step_peak_bytes"
    assert unknown_metric("step_peak_bytes.rank1") is None and unknown_metric("rss_peak_bytes") is None
    assert "step_peak_bytes" in unknown_metric("step_peak")


def test_an_unknown_metric_lists_every_name_whole_in_one_line(capsys, tmp_path, monkeypatch):
    err = _refused(capsys, tmp_path, monkeypatch, "--metric", "nope", "--", "python", "train.py")
    assert "unknown metric 'nope'" in err and "chars)" not in err   # ours: never cut
    for name in [*metric_names(), "<metric>.rank<N>"]:
        assert name in err
    long = _refused(capsys, tmp_path, monkeypatch, "--metric", "x" * 5000, "--", "python", "train.py")
    assert "(5000 chars)" in long and "optimizer_steps" in long   # the foreign name is cut, the list is not


@pytest.mark.parametrize("metric, value, shown", [
    ("peak_rss_mib", 706.0, "706.0 MiB"),                  # not "706 B"
    ("peak_tokens_per_s", 706.0, "706"),                    # a rate: no unit it does not declare
    ("peak_memory", 706.0, "706"),                          # "peak" says nothing of the unit
    ("latency_us", 12.0, "12.0 us"), ("latency_ms_p50", 12.0, "12.0 ms"), ("gap_ns", 3.0, "3.0 ns"),
    ("load_s", 0.5, "0.500 s"), ("buffer_kib", 100.0, "100.0 KiB"), ("shard_gb", 1.5, "1.5 GB"),
    ("step_peak_bytes.rank1", 3 * 2**20, "3.00 MiB"), ("step_seconds", 0.25, "0.250 s"),
    # the built-in probes' names print as they did
    ("ga_excess_bytes_per_param", 1.2441, "1.244 B/param"), ("peak_bytes.fp32.ga1.h64", 2**20, "1.00 MiB"),
    ("bytes_per_param.bf16.ga2.peak", 2.0, "2.000 B/param"), ("ga_excess_fixed_bytes", 2048, "2.00 KiB"),
    ("step_seconds_max.fp32", 0.5, "0.500 s"), ("tokens_per_second", 1234.5, "1234.5"), ("fit_r2_min", 0.99, "0.99"),
    ("n_params.h64", 12345.0, "12345"), ("bytes_per_token.fp32.ga1.peak", 3.0, "3.0 B/token"),
    ("import_rss_bytes", 4096.0, "4.00 KiB"), ("optimizer_steps", 4.0, "4"),
])
def test_units_come_from_the_names_suffix_never_guessed(metric, value, shown):
    assert human_value(value, metric) == shown


def test_a_unit_the_probe_declares_is_read_and_travels_with_the_result():
    from bisector.core.measurement import Measurement, Status
    from bisector.core.result import BisectResult

    def measured(units):
        return Measurement(key="k", package="p", candidate="1.0", env_fingerprint="e", probe_fingerprint="f",
                           status=Status.OK, seconds=1.0, metrics={"u33_latency": 12.0, "u33_mem": 3.0},
                           details={"result": {"units": units}})

    assert human_value(12.0, "u33_latency") == "12" and human_value(3.0, "u33_mem") == "3"   # nothing declared yet
    measured({"u33_latency": "ms", "u33_mem": "MiB", "u33_odd": "\x1b[31mred", "u33_count": "count"})
    assert human_value(12.0, "u33_latency") == "12.0 ms" and human_value(3.0, "u33_mem.rank1") == "3.0 MiB"
    assert human_value(5.0, "u33_odd") == "5" and human_value(5.0, "u33_count") == "5"   # not shown: not a unit
    measured({"u33_power": "W", "u33_size": "bytes"})
    assert human_value(250.0, "u33_power") == "250 W" and human_value(2**20, "u33_size") == "1.00 MiB"
    stored = BisectResult.model_validate({"run_id": "r", "package": "p", "mode": "release", "status": "found",
                                          "reason": "x", "criterion": "c", "units": {"u33_stored": "ms"}})
    assert human_value(4.0, "u33_stored") == "4.0 ms" and '"units"' in stored.model_dump_json()


def test_a_threshold_inside_an_endpoints_spread_is_said():
    calibrated = calibrate(Criterion(metric="rss_peak_bytes", threshold=100.5 * 2**20, repeats=3))
    said = inside_spread(calibrated, [("4.36.0", [99 * 2**20, 101 * 2**20, 100 * 2**20]), ("4.38.2", [2e9])])
    assert "inside the spread of 4.36.0's own 3 repeats" in said and "--compare stats" in said
    assert inside_spread(calibrated, [("4.36.0", [90 * 2**20, 91 * 2**20]), ("4.38.2", [2e9, 2.1e9])]) is None


def test_the_repro_embeds_the_meter_exactly():
    files = dict(meter_probe_files())
    assert set(files) == {f"command/{name}.py" for name in COMMAND_FILES} | {
        "_meters/__init__.py", "_meters/cgroup.py", "_meters/tensor_bytes.py", "_meters/site_bytes.py", "_meters/sites.py",
        "_meters/cuda.py", "_meters/phases.py", "_meters/fake_reads.py", "_probe_contract.py"}
    namespace: dict = {"base64": base64}
    exec("\n".join(files_dict(meter_probe_files(), "the meter")), namespace)   # noqa: S102 - how the script holds them
    assert {rel: source.encode() if isinstance(source, str) else source for rel, source in namespace["FILES"].items()} \
        == {rel: (probes_dir() / rel).read_bytes() for rel in files}


def _records(tmp_path: Path, procs: dict[int, list[dict]]) -> Path:
    for pid, lines in procs.items():
        (tmp_path / f"{pid}.jsonl").write_bytes(b"".join(encode(KEY, x) for x in lines) + b'0123 {"kind": "st')
    return tmp_path   # (each file ends in a line cut short by a kill: it is ignored)


def read_records(directory: Path) -> dict:
    procs, problems, cut = read_processes(str(directory), KEY)
    assert problems == [] and cut == len(procs)
    return procs


def _proc(rank, peaks, meter="cpu-dispatch", end=True):
    lines = [{"kind": "load", "rank": rank}, {"kind": "torch", "meter": meter, "device": "cpu"}]
    lines += [{"kind": "step", "i": i, "peak_bytes": p, "run_peak_bytes": max(peaks[:i + 1]), "seconds": 0.1 * (i + 1)}
              for i, p in enumerate(peaks)]
    return lines + ([{"kind": "end", "wall": 2.0, "max_rss": 5000, "run_peak_bytes": max(peaks or [7])}] if end else [])


def test_ranks_are_max_over_ranks_with_each_ranks_own_and_helpers_left_out(tmp_path):
    procs = read_records(_records(tmp_path, {10: _proc(None, []), 11: _proc("0", [90, 10, 12]),
                                             12: _proc("1", [80, 20, 21], end=False)}))
    metrics, facts = summarize(procs, 1, 3.0)
    assert metrics["step_peak_bytes"] == 21 and metrics["step_peak_bytes.rank0"] == 12
    assert metrics["step_peak_bytes.rank1"] == 21 and metrics["optimizer_steps"] == 3
    assert metrics["step_seconds.rank0"] == pytest.approx(0.25) and metrics["wall_seconds"] == 3.0
    assert metrics["peak_bytes.rank1"] == 80            # rank 1 was killed: its steps' running peak stands
    assert [r["rank"] for r in facts["ranks"]] == [0, 1]   # the process that never stepped is no rank
    metrics, facts = summarize(procs, 3, 3.0)
    assert "step_peak_bytes" not in metrics and "leaves none to measure" in facts["absent"]["step_peak_bytes"]


def test_the_no_step_reasons_say_why_and_what_to_read_instead(tmp_path):
    no_step = _proc("0", [])
    procs = read_records(_records(tmp_path, {10: no_step}))
    metrics, facts = summarize(procs, 1, 3.0)
    why = facts["absent"]["step_peak_bytes"]
    assert "stepped no optimizer" in why and "--metric peak_bytes" in why and metrics["peak_bytes"] == 7
    old = [line if line["kind"] != "torch" else {**line, "version": "1.13.1", "optimizer_hooks": False}
           for line in no_step]
    (tmp_path / "old").mkdir()
    procs = read_records(_records(tmp_path / "old", {11: old}))
    metrics, facts = summarize(procs, 1, 3.0)
    why = facts["absent"]["step_peak_bytes"]
    assert why.startswith("torch 1.13.1 has no global optimizer hooks (they came in torch 2.0)")
    assert "stepped no optimizer" not in why and facts["scope"] == "whole run (torch 1.13.1 has no global optimizer hooks)"


def test_a_program_only_the_candidate_installs_is_not_refused_up_front(tmp_path):
    """Only a program that can be known missing is refused before anything is built: a path that is no
    executable file. A bare name (a console script the candidate installs) is looked up when it runs."""
    ProgramProbe(command=["llamafactory-cli", "train", "x.yaml"], cwd=tmp_path).check("cpu")
    ProgramProbe(command=["no-such-program-anywhere"], cwd=tmp_path).check("cpu")
    with pytest.raises(Exception, match="is not an executable file"):
        ProgramProbe(command=["./train.sh"], cwd=tmp_path).check("cpu")


def test_a_job_files_command_takes_measure_skip_and_meter_from_the_command_line(tmp_path, monkeypatch):
    from bisector.cli.overrides import run_overrides
    from bisector.cli.main import _parse

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bisect.toml").write_text('[job]\npackage = "transformers"\ngood = "4.36.0"\nbad = "4.38.2"\n'
                                          '[probe]\ncommand = ["python", "train.py"]\n')
    args = _parse(["run", "--measure-skip", "2", "--meter", "rss"])
    config = load_config(tmp_path / "bisect.toml", run_overrides(args))
    assert config.probe.command == ["python", "train.py"] and config.probe.meter_args() == [
        "--measure-skip", "2", "--meter", "rss"]
    args = _parse(["matrix", "--config", "m.toml", "--measure-skip", "0", "--", "python", "t.py"])
    assert args.command == "matrix" and args.command_words == ["python", "t.py"] and args.measure_skip == 0
