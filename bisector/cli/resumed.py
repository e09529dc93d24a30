"""``bisector run --resume [RUN]``: which stored run it resumes, with which configuration (its own job,
probe and criterion; a flag that would change them refused, never ignored)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from bisector.store.run_record import config_hash, stopped_run
from bisector.cli.overrides import run_job, run_overrides
from bisector.job.config import JobConfig
from bisector.job.layering import validated
from bisector.errors import UsageError
from bisector.redact import MASK
from bisector.store.storage import RunKind, RunRow, Store
from bisector.safety.safe_text import shell_join


def _given(table) -> bool:
    """Whether a flags table sets anything (None and empty lists are 'not given')."""
    if isinstance(table, dict):
        return any(_given(v) for v in table.values())
    return table is not None and table != []


def resumed(args, config_path: Optional[Path], store: Optional[Store]):
    """The configuration, command and id of a stored run, for ``--resume [RUN]``: RUN is a run id or a
    config hash (or a prefix of one); without it, the latest run of the job that ./bisect.toml and the
    other flags give (by its config hash), or with neither, the latest bisect run. A named run keeps its
    own job, probe and criterion (a flag that would change them is refused, not ignored); [run] flags
    (how to run it) apply."""
    overrides = {k: v for k, v in run_overrides(args).items() if k != "run"}   # how to run it is no part of the job
    if args.resume and args.config is not None:
        _refuse_changes(["config"])
    if store is None:
        raise UsageError("no stored runs to resume (nothing has been measured yet)")
    if args.resume:
        found = store.get_run(args.resume)
        runs = [found] if found else store.runs_with_hash(args.resume, RunKind.BISECT)
        what = f"run or config hash {shown(args.resume)}"
        if runs and runs[0].kind is RunKind.BISECT:
            _refuse_changes(_changed_by(runs[0].config, overrides))
    elif config_path is not None or _given(overrides):
        wanted = config_hash(run_job(config_path, args))
        runs, what = store.runs_with_hash(wanted, RunKind.BISECT), f"run of this job (config hash {wanted})"
    else:
        runs, what = [r for r in store.list_runs()[::-1] if r.kind is RunKind.BISECT][:1], "bisect run"
    run = runs[0] if runs else None
    if run is None or run.kind is not RunKind.BISECT:
        raise UsageError(f"no bisect {what} to resume in {store.path}")
    data = with_secrets(run)
    data["run"] = {**(data.get("run") or {}), **{k: v for k, v in run_overrides(args)["run"].items() if v is not None}}
    config = validated(JobConfig, data, f"run {run.id}")
    if run.config_hash and masked_values(run.config) and config_hash(config) != run.config_hash:
        raise UsageError(f"the values in {SECRET_VARIABLE}1... do not give back run {run.id}'s job (its config hash "
                         f"is {run.config_hash}, they make {config_hash(config)}): give each word as it was typed")
    print(f"resuming run {run.id} (config {run.config_hash}): {shell_join(run.command)}", file=sys.stderr)
    return config, run.command, run.id


SECRET_VARIABLE = "BISECTOR_SECRET_"   # BISECTOR_SECRET_1, _2, ...: a stored run's masked words, given back


def masked_values(data) -> list[tuple[str, str]]:
    """(where, the stored value) of every value of a stored job that the redaction pass masked, in order."""
    found: list[tuple[str, str]] = []

    def walk(value, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, str) and MASK in value:
            found.append((where, value))

    walk(data, "")
    return found


def with_secrets(run: RunRow) -> dict:
    """A stored run's job with each masked value (a secret of its command, a URL's credentials: the store keeps
    them masked, never the real words) given back from BISECTOR_SECRET_<n>; one line naming them if any is
    not set."""
    masked = masked_values(run.config)
    missing = [f"{SECRET_VARIABLE}{i} ({where} = {value})" for i, (where, value) in enumerate(masked, 1)
               if f"{SECRET_VARIABLE}{i}" not in os.environ]
    if missing:
        raise UsageError(f"run {run.id} was stored with {len(masked)} secret(s) masked: give each whole value as it "
                         f"was typed in {', '.join(missing)} and resume again")
    values = iter(os.environ[f"{SECRET_VARIABLE}{i}"] for i in range(1, len(masked) + 1))

    def put(value):
        if isinstance(value, dict):
            return {key: put(item) for key, item in value.items()}
        if isinstance(value, list):
            return [put(item) for item in value]
        return next(values) if isinstance(value, str) and MASK in value else value

    return put(json.loads(json.dumps(run.config)))


def interrupted_run(store: Optional[Store], config: JobConfig) -> Optional[RunRow]:
    """The run that the same command, run again, continues: the latest bisect of this job (its config
    hash) when it stopped before its end (interrupted, or killed outright). So "run the same command
    again to resume" holds, and the stopped run does not stay beside a second run that finished the job."""
    return stopped_run(store, RunKind.BISECT, config_hash(config))


JOB_TABLES = ("job", "env", "probe", "criterion")


def _changed_by(stored: dict, overrides: dict) -> list[str]:
    """The flags among ``overrides`` that would change a stored run's job, probe or criterion (a flag
    that repeats the stored value changes nothing)."""
    given = {table: {k: v for k, v in overrides[table].items() if _given(v)} for table in JOB_TABLES}
    if not any(given.values()):
        return []
    try:
        base = JobConfig.model_validate(stored).model_dump(mode="json")
    except ValidationError:
        return []   # not a job this bisector reads: resuming it is refused as such
    data = json.loads(json.dumps(stored))
    for table, values in given.items():
        data[table] = {**(data.get(table) or {}), **values}
    try:
        merged = validated(JobConfig, data, "the flags").model_dump(mode="json")
    except UsageError:
        return [key for values in given.values() for key in values]
    return [key for table, values in given.items() for key in values
            if merged[table].get(key) != base[table].get(key) or key not in merged[table]]


def _refuse_changes(keys: list[str]) -> None:
    if keys:
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in keys)
        raise UsageError(f"--resume reruns a stored run with its own configuration; {flags} would change it "
                         "(start a new run without --resume, or --resume without a run id to find it by them)")


def shown(run_id: Optional[str]) -> str:
    """A run id as an error message quotes it (a pasted novel is cut)."""
    return repr(run_id if run_id is None or len(run_id) <= 40 else run_id[:40] + "...")
