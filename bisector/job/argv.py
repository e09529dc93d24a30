"""A job written back as its ``bisector run`` command line: the one writer of the commands bisector
offers to run next (a diff's follow-up bisect, a matrix's bisect of what moved). Machine-local
settings (store, cache dir, executor) stay out; every other setting that differs from its default is
written with the flag that sets it, so the command reproduces the job on another machine."""
from __future__ import annotations

from bisector.job.config import JobConfig, JobSection, Mode
from bisector.core.criterion import Criterion
from bisector.job.probe_spec import ProbeSpec

_JOB_DEFAULTS = JobSection(package="x", good="0", bad="1")
_CRITERION_DEFAULTS = Criterion()
# criterion field -> flag, for the fields given as a value
_CRITERION_VALUES = (("metric", "--metric"), ("threshold", "--threshold"), ("max_increase", "--max-increase"),
                     ("repeats", "--repeats"), ("max_repeats", "--max-repeats"), ("noise", "--noise"),
                     ("min_effect", "--min-effect"), ("alpha", "--alpha"))


def _value(value) -> str:
    return format(value, ".12g") if isinstance(value, float) else str(value)


def _job_words(job: JobSection) -> list[str]:
    words = ["--package", job.package, "--good", job.good, "--bad", job.bad, "--mode", job.mode.value]
    words += ["--repo", job.repo] if job.repo and job.mode is not Mode.RELEASES else []
    words += ["--pre"] if job.pre else []
    words += ["--find-fix"] if job.find_fix else []
    for pin in job.pins:
        words += ["--with", str(pin)]
    words += ["--env", job.env] if job.env != _JOB_DEFAULTS.env else []
    words += ["--nightly-index", job.nightly_index] if job.nightly_index else []
    return words + (["--index-url", job.index_url] if job.index_url else [])


def _probe_words(probe: ProbeSpec) -> list[str]:
    words = ["--probe-cmd", probe.cmd] if probe.cmd else ["--probe", probe.name or str(probe.path)]
    return words + [f"--probe-arg={a}" for a in probe.args]


def _criterion_words(crit: Criterion) -> list[str]:
    words = []
    for field, flag in _CRITERION_VALUES:
        value = getattr(crit, field)
        if value is not None and value != getattr(_CRITERION_DEFAULTS, field):
            words += [flag, _value(value)]
    words += ["--auto"] if crit.auto else []
    words += ["--compare", crit.compare.value] if crit.compare != _CRITERION_DEFAULTS.compare else []
    words += ["--crash-is-bad"] if crit.crash_is_bad else []
    words += ["--confirm" if crit.confirm else "--no-confirm"] if crit.confirm is not None else []
    return words + ["--direction", crit.direction.value] if crit.metric else words


def run_argv(config: JobConfig) -> list[str]:
    """``config`` as a ``bisector run`` command line (a list of words; see the module)."""
    return ["bisector", "run", *_job_words(config.job), *_probe_words(config.probe),
            *_criterion_words(config.criterion)]
