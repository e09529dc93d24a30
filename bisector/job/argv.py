"""A job written back as its ``bisector run`` command line: the one writer of the commands bisector
offers to run next (a diff's follow-up bisect, a matrix's bisect of what moved). Machine-local
settings (store, cache dir, executor) stay out; every other setting that differs from its default is
written with the flag that sets it, so the command reproduces the job on another machine. A user's own
program (``-- CMD``) ends the line, after ``--``, and runs where the command is started, as it did."""
from __future__ import annotations

from bisector.job.config import JobConfig, JobSection, Mode
from bisector.core.criterion import Criterion
from bisector.job.jobfile import builtin_job
from bisector.job.probe import BuiltinProbe, ProbeBase, probe_from
from bisector.redact import mask_words

_JOB_DEFAULTS = JobSection(package="x", good="0", bad="1")
_PROBE_DEFAULTS = BuiltinProbe(name="x")
REPLACE = "--replace-probe-args"
_CRITERION_DEFAULTS = Criterion()
# criterion field -> flag, for the fields given as a value
_CRITERION_VALUES = (("metric", "--metric"), ("threshold", "--threshold"), ("max_increase", "--max-increase"),
                     ("max_change", "--max-change"),
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
    words += ["--index-url", job.index_url] if job.index_url else []
    return words + _search_words(job)


def _search_words(job: JobSection) -> list[str]:
    """How far the search goes and what it does after the boundary, where it differs from the default."""
    words = ["--repo-url", job.repo_url] if job.repo_url else []
    words += ["--all-parents"] if not job.first_parent else []
    words += ["--widen"] if job.widen else []
    words += ["--clone"] if job.clone else []
    words += ["--no-attribute"] if not job.attribute else []
    words += ["--follow" if job.follow else "--no-follow"] if job.follow is not None else []
    words += ["--follow-repo", job.follow_repo] if job.follow_repo else []
    return words + (["--no-confirm-revert"] if not job.confirm_revert else [])


def _probe_words(probe: ProbeBase) -> list[str]:
    """The probe's flags; a user's program is not among them: it follows ``--`` (``program_words``)."""
    words = probe.flag_words() + (_probe_arg_words(probe) if not probe.program_words() else [])
    return words + (["--timeout", _value(probe.timeout)] if probe.timeout != _below(probe).timeout else [])


def _below(probe: ProbeBase) -> ProbeBase:
    """The probe settings a command line is layered over: the built-in default job's for its probe
    (the same probe), else the defaults."""
    default = probe_from(builtin_job().get("probe") or {})
    return default if type(probe) is type(default) and probe.label() == default.label() else _PROBE_DEFAULTS


def _probe_arg_words(probe: ProbeBase) -> list[str]:
    """The probe's arguments as ``--probe-arg`` words follow them: on the built-in default job's probe, a
    command line's arguments come after that job's (``bisector run`` layers flags over it), so the
    job's own are left out where they lead, and ``--replace-probe-args`` stands first where they do not."""
    below, words = _below(probe).args, [f"--probe-arg={a}" for a in probe.args]
    if not below:
        return words
    return words[len(below):] if probe.args[:len(below)] == below else [REPLACE, *words]


def _criterion_words(crit: Criterion) -> list[str]:
    words = []
    for field, flag in _CRITERION_VALUES:
        value = getattr(crit, field)
        if value is not None and value != getattr(_CRITERION_DEFAULTS, field):
            words += [flag, _value(value)]
    words += ["--auto"] if crit.auto else []
    words += ["--compare", crit.compare.value] if crit.compare != _CRITERION_DEFAULTS.compare else []
    words += ["--crash-is-bad"] if crit.crash_is_bad else []
    words += ["--no-oom-is-bad"] if not crit.oom_is_bad else []
    words += ["--timeout-is-bad"] if crit.timeout_is_bad else []
    words += ["--confirm" if crit.confirm else "--no-confirm"] if crit.confirm is not None else []
    return words + ["--direction", crit.direction.value] if crit.metric else words


def run_argv(config: JobConfig) -> list[str]:
    """``config`` as a ``bisector run`` command line (a list of words; see the module), its secrets masked
    (bisector.redact.mask_words): a written command never holds one (a run of it asks for them)."""
    program = config.probe.program_words()
    torch = ["--torch", config.env.torch] if config.env.torch else []
    return mask_words(["bisector", "run", *_job_words(config.job), *torch, *_probe_words(config.probe),
                       *_criterion_words(config.criterion), *program])
