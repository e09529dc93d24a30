"""Where a job's settings come from: the built-in default job < the job file < the flags, with the
rules for settings that belong together (a probe's criterion and contrast, a package's range and
reference). Pure: no index, no environment."""
from __future__ import annotations

import pytest

from bisector.cli.args import build_parser, run_overrides
from bisector.errors import UsageError
from bisector.jobfile import load_config


def _job(*flags, file_text=None, tmp_path=None):
    path = None
    if file_text is not None:
        path = tmp_path / "bisect.toml"
        path.write_text(file_text)
    args = build_parser().parse_args(["run", *flags])
    return load_config(path, run_overrides(args))


def test_no_file_no_flags_is_the_default_job():
    cfg = _job()
    assert (cfg.job.package, cfg.job.good, cfg.job.bad) == ("accelerate", "v0.20", "v0.22")
    assert cfg.probe.name == "ga_memory" and cfg.probe.args == ["--loop=trainer"]
    assert (cfg.criterion.metric, cfg.criterion.threshold) == ("ga_excess_bytes_per_param", 0.5)
    assert cfg.contrast.args == ["--loop=accelerate"] and cfg.reference.version == "0.22.0"


def test_the_repositorys_bisect_toml_is_the_default_job():
    from pathlib import Path

    repo_file = Path(__file__).resolve().parent.parent / "bisect.toml"
    assert load_config(repo_file, {}).model_dump() == load_config(None, {}).model_dump()


def test_another_package_keeps_the_probe_and_drops_the_range_and_the_reference():
    cfg = _job("--package", "transformers", "--good", "4.38.2", "--bad", "4.40.0")
    assert cfg.reference is None and cfg.probe.args == ["--loop=trainer"] and cfg.contrast is not None
    with pytest.raises(UsageError, match="give good and bad for transformers"):
        _job("--package", "transformers")


def test_another_probe_drops_the_default_probes_args_criterion_and_contrast():
    cfg = _job("--probe", "import_cost")
    assert cfg.probe.args == [] and cfg.criterion.metric is None and cfg.contrast is None
    assert cfg.job.package == "accelerate" and cfg.reference is not None


def test_probe_args_flags_add_to_the_jobs_and_a_files_replace_them(tmp_path):
    assert _job("--probe-arg=--sizes=64,128").probe.args == ["--loop=trainer", "--sizes=64,128"]
    cfg = _job(file_text='[probe]\nargs = ["--loop=accelerate"]\n', tmp_path=tmp_path)
    assert cfg.probe.args == ["--loop=accelerate"] and cfg.probe.name == "ga_memory"


def test_a_rule_replaces_the_rule_below_and_keeps_its_metric(tmp_path):
    cfg = _job("--max-increase", "20%")
    assert (cfg.criterion.max_increase, cfg.criterion.threshold, cfg.criterion.metric) == (
        "20%", None, "ga_excess_bytes_per_param")
    cfg = _job(file_text="[criterion]\nthreshold = 1.0\n", tmp_path=tmp_path)
    assert (cfg.criterion.threshold, cfg.criterion.metric) == (1.0, "ga_excess_bytes_per_param")
