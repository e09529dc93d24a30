"""Where a bisect job's settings come from, in one place: the built-in default job, then the job
file (``./bisect.toml`` or ``--config``), then the command line. Each layer overrides the one below
it table by table and key by key, with these rules for settings that belong together:

* choosing a probe (``name``, ``path``, ``cmd`` or a ``command`` after ``--``) other than the layer below's drops that layer's
  ``[probe]`` settings, ``[criterion]`` and ``[contrast]``: they were written for that probe;
* choosing a criterion rule (``threshold``, ``max_increase``, ``auto``) replaces the one below, and so
  does ``compare = "stats"`` (it judges by the samples, without a rule);
* naming another package drops the layer below's ``good``, ``bad``, ``repo``, ``repo_url`` and
  ``[reference]``: they were about that package;
* ``--probe-arg`` flags are added after the probe's arguments from below (the last one of a
  probe's own flags wins); a file's ``args`` replace them;
* a ``[reference]`` (what an upstream report measured) is about the probe setting of the layer that
  gives it (its ``probe`` and ``args``, stamped from that layer unless written out) and replaces a
  reference below whole. It stays only in a run it is about: the same package, a range that holds
  its version, and that probe with the same arguments as the probe reads them (the default job and
  its ``--widen``, not ``--probe-arg=--loop=accelerate`` or another probe's speed bisect).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name
from packaging.version import Version

from pydantic import ValidationError

from bisector.redact import mask_words
from bisector.safety.safe_text import command_as
from bisector.job.config import JobConfig
from bisector.job.layering import merge, read_toml, validated, validation_message
from bisector.core.probe_args import effective_args
from bisector.data import default_job_path
from bisector.errors import UsageError

PROBE_KINDS = ("name", "path", "cmd", "command")
RULES = ("threshold", "max_increase", "auto")
ABOUT_THE_PACKAGE = ("good", "bad", "repo", "repo_url")


def _given(table: Optional[dict], keys) -> dict:
    return {k: v for k, v in (table or {}).items() if k in keys and v is not None}


def _same(lower: dict, upper: dict, section: str, keys, normalise=lambda v: v) -> bool:
    """Whether ``upper`` leaves ``lower``'s choice among ``keys`` of ``section`` as it is."""
    chosen = _given(upper.get(section), keys)
    before = _given(lower.get(section), keys)
    return not chosen or {k: normalise(v) for k, v in chosen.items()} == {k: normalise(v) for k, v in before.items()}


def _drop_what_belongs_below(lower: dict, upper: dict) -> dict:
    """``lower`` without what ``upper``'s choices of probe and package make meaningless."""
    lower = {k: (dict(v) if isinstance(v, dict) else v) for k, v in lower.items()}
    if not _same(lower, upper, "probe", PROBE_KINDS):
        for section in ("probe", "criterion", "contrast"):
            lower.pop(section, None)
    if not _same(lower, upper, "job", ("package",), lambda v: canonicalize_name(str(v))):
        for key in ABOUT_THE_PACKAGE:
            lower.get("job", {}).pop(key, None)
        lower.pop("reference", None)
    if _given(upper.get("criterion"), RULES) or (upper.get("criterion") or {}).get("compare") == "stats":
        lower["criterion"] = {k: v for k, v in (lower.get("criterion") or {}).items() if k not in RULES}
    if "reference" in upper:
        lower.pop("reference", None)
    return lower


def _probe_label(probe: dict) -> Optional[str]:
    """How ProbeSpec.label names the probe of a raw ``[probe]`` table."""
    if probe.get("cmd"):
        return f"cmd: {probe['cmd']}"
    if probe.get("command"):
        return f"command: {command_as(mask_words(str(w) for w in probe['command']))}"
    return probe.get("name") or (str(probe["path"]) if probe.get("path") else None)


def _stamp_reference(data: dict) -> dict:
    """The layer's ``[reference]`` with the probe setting it was written for (its layer's probe)."""
    ref, probe = data.get("reference"), data.get("probe") or {}
    if isinstance(ref, dict):
        ref.setdefault("probe", _probe_label(probe))
        ref.setdefault("args", list(probe.get("args") or []))
    return data


def _version(text) -> Optional[Version]:
    try:
        return Version(str(text).strip().removeprefix("v"))
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        return None


def _reference_is_about(data: dict) -> bool:
    """Whether the job's ``[reference]`` is about this run: package, range and probe setting (module)."""
    ref, job, probe = data["reference"], data.get("job") or {}, data.get("probe") or {}
    if canonicalize_name(str(ref.get("package", ""))) != canonicalize_name(str(job.get("package", ""))):
        return False
    if ref.get("probe") != _probe_label(probe) or effective_args(list(ref.get("args") or [])) != effective_args(
            list(probe.get("args") or [])):
        return False
    ends, version = [_version(job.get("good")), _version(job.get("bad"))], _version(ref.get("version"))
    return None not in ends and version is not None and min(ends) <= version <= max(ends)


def stack(lower: dict, upper: dict, append_args: bool = False) -> dict:
    """``upper`` over ``lower`` by the module's rules; ``append_args``: upper's probe args (flags) go
    after lower's instead of replacing them."""
    kept = _drop_what_belongs_below(lower, upper)
    data = merge(kept, upper)
    extra = (upper.get("probe") or {}).get("args")
    if append_args and extra and (kept.get("probe") or {}).get("args"):
        data["probe"]["args"] = [*kept["probe"]["args"], *extra]
    return data


def builtin_job() -> dict:
    """The built-in default job's tables."""
    return read_toml(default_job_path())


def load_config(path: Optional[Path], overrides: dict, append_args: bool = True) -> JobConfig:
    """The job: the built-in default job, ``path`` over it (when given), then ``overrides`` (flags): their
    probe arguments follow the job's, or with ``append_args`` false (--replace-probe-args) replace them."""
    data, source = _stamp_reference(builtin_job()), "command line"
    if path is not None:
        raw = read_toml(path)
        data, source = _stamp_reference(stack(data, raw)), str(path)
        _check_file_values(raw, data, source)
    below = data
    data = stack(data, overrides, append_args=append_args)
    if isinstance(data.get("reference"), dict) and not _reference_is_about(data):
        del data["reference"]
    job = data.get("job") or {}
    if job.get("package") and (job.get("good") is None or job.get("bad") is None):
        raise UsageError(f"{source}: give good and bad for {job['package']} (--good, --bad): the built-in "
                         "default job's range is for accelerate")
    try:
        return validated(JobConfig, data, source)
    except UsageError:
        if source == "command line" or not _valid(below):
            raise
        return validated(JobConfig, data, "command line")  # the file alone is fine: a flag is wrong


def _given_at(raw: dict, loc: tuple) -> bool:
    """Whether the job file itself gives a value at ``loc`` (a section and a key, at least)."""
    node = raw
    for part in loc[:2]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return len(loc) >= 2


def _check_file_values(raw: dict, data: dict, source: str) -> None:
    """A value the job file gives is checked as the file gives it, whether or not a flag overrides it or
    a flag's choice drops its table: ``jobs = "many"`` is refused with ``--jobs 2`` too. Only the
    file's own keys are judged here (a range the flags complete is judged with them)."""
    try:
        JobConfig.model_validate(data)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if e["type"] != "missing" and _given_at(raw, e["loc"])]
        if errors:
            raise UsageError(validation_message(source, exc, errors)) from None


def _valid(data: dict) -> bool:
    try:
        JobConfig.model_validate(data)
        return True
    except ValueError:
        return False
