"""Where a job's settings come from: the built-in default job < the job file < the flags, with the
rules for settings that belong together (a probe's criterion and contrast, a package's range and
reference). Pure: no index, no environment."""
from __future__ import annotations

import pytest

from bisector.cli.overrides import run_overrides
from bisector.cli.subcommands import build_parser
from bisector.errors import UsageError
from bisector.job.jobfile import load_config


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

    repo_file = Path(__file__).resolve().parents[2] / "bisect.toml"
    assert load_config(repo_file, {}).model_dump() == load_config(None, {}).model_dump()


def test_another_package_keeps_the_probe_and_drops_the_range_and_the_reference():
    cfg = _job("--package", "transformers", "--good", "4.38.2", "--bad", "4.40.0")
    assert cfg.reference is None and cfg.probe.args == ["--loop=trainer"] and cfg.contrast is not None
    with pytest.raises(UsageError, match="give good and bad for transformers"):
        _job("--package", "transformers")


def test_another_probe_drops_the_default_probes_args_criterion_contrast_and_reference():
    cfg = _job("--probe", "import_cost")
    assert cfg.probe.args == [] and cfg.criterion.metric is None and cfg.contrast is None
    assert cfg.job.package == "accelerate" and cfg.reference is None


def test_the_reference_stays_only_in_a_run_of_its_package_range_and_probe_setting(tmp_path):
    kept = _job()
    assert (kept.reference.probe, kept.reference.args) == ("ga_memory", ["--loop=trainer"])
    assert _job("--widen").reference is not None and _job("--good", "0.17", "--bad", "0.23").reference is not None
    assert _job("--probe-arg=--loop=trainer").reference is not None   # the same setting as the probe reads it
    assert _job("--probe-arg=--loop=accelerate").reference is None    # the maintainers' loop, not the report's
    assert _job("--good", "0.20", "--bad", "1.0", "--probe-arg=--loop=accelerate").reference is None
    assert _job("--good", "0.27", "--bad", "0.28").reference is None   # a range without the report's version
    assert _job("--probe", "step_time", "--metric", "step_seconds", "--compare", "stats", "--good", "0.21",
                "--bad", "0.23").reference is None
    own = ('[probe]\nname = "ga_memory"\nargs = ["--loop=accelerate"]\n[reference]\ntitle = "t"\n'
           'package = "accelerate"\nversion = "0.21.0"\nsetting = "s"\n')
    cfg = _job(file_text=own, tmp_path=tmp_path)
    assert (cfg.reference.title, cfg.reference.args) == ("t", ["--loop=accelerate"])   # whole, not merged
    assert _job("--probe-arg=--sizes=64", file_text=own, tmp_path=tmp_path).reference is None


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


@pytest.mark.parametrize("job, said", [
    ({"package": "accelerate", "mode": "commits"}, "--mode commits needs --repo (a local path or a git URL)"),
    ({"package": "torch", "mode": "commits", "repo": "/src/pytorch"}, "torch is bisected by release, then by nightly"),
    ({"package": "torch", "mode": "commits"}, "torch is bisected by release, then by nightly"),
    ({"package": "accelerate", "mode": "nightlies"}, "--mode nightlies is torch's (nightly wheels from --nightly-index), "
                                                     "not accelerate's"),
    ({"package": "accelerate", "mode": "commits", "repo": "/src/accelerate"}, None),
    ({"package": "torch", "mode": "nightlies"}, None),
    ({"package": "torch", "mode": "auto", "repo": "/src/pytorch"}, None),
])
def test_the_mode_rules_are_stated_once_by_the_job(job, said):
    """What preflight and the driver both refuse (one line, exit 2), said by the job section itself."""
    from bisector.job.config import JobSection
    problem = JobSection(good="1", bad="2", **job).mode_problem()
    assert problem is None if said is None else problem.startswith(said)
