"""The hostile-input battery: every kind a careful user or an attacker might try, by class (bad flags, bad
configs, bad repositories, bad stores, bad probes, signals, concurrency, a full disk, secrets).

Each kind in the tables asserts its exit code, that it says why in one line (no traceback), that
nothing was created (no store, no cache, no report: the kind's directory is as it was) and nothing
stored (a store that was there keeps its rows), that no process was left behind, and that none of
the secrets planted in its environment appear in what it printed. The kinds that need real probes
(processes left behind, signals, secrets through every entry point) are below the tables.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.job.jobfile import load_config
from bisector.store.storage import RunKind, RunRow, Store, now
from tests.support.hostile import (JOB_TOML, SECRET_ENV, URL_SECRET, Kind, World, build_world, children_of, commits,
                                   config_kind, local_index, processes_with, releases, toml)

ROOT = Path(__file__).resolve().parents[2]


# -- stores the store kinds start from ---------------------------------------------------------------------
def _store_with_runs(path: Path, n: int = 300) -> None:
    store = Store(path)
    for i in range(n):
        store.put_run(RunRow(id=f"run{i:04d}", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                             config={"pad": "x" * 1500}, status="found"))
    store.close()


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[4096 * 20:4096 * 21] = b"\xa5" * 4096   # one b-tree page of the runs table
    path.write_bytes(bytes(data))


def valid_store(tmp: Path, world: World) -> None:
    _store_with_runs(tmp / "s.db", 3)


def store_with_a_job(tmp: Path, world: World) -> None:
    """A store holding one bisect of the default job, run id feedface0000."""
    store = Store(tmp / "s.db")
    store.put_run(RunRow(id="feedface0000", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                         config=load_config(None, {}).model_dump(mode="json"), status="interrupted"))
    store.close()


def damaged_store(tmp: Path, world: World) -> None:
    template = world.root / "damaged.db"
    if not template.exists():
        _store_with_runs(template)
        (world.root / "damaged.db.init.lock").unlink()
        _damage(template)
    shutil.copyfile(template, tmp / "s.db")


def foreign_store(tmp: Path, world: World) -> None:
    (tmp / "s.db").write_text("this is not sqlite\n" * 100)


def truncated_store(tmp: Path, world: World) -> None:
    (tmp / "s.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 80)


def future_store(tmp: Path, world: World) -> None:
    _store_with_runs(tmp / "s.db", 1)
    db = sqlite3.connect(tmp / "s.db")
    db.execute("UPDATE meta SET value='99' WHERE key='version'")
    db.commit()
    db.close()


def store_dir(tmp: Path, world: World) -> None:
    (tmp / "s.db").mkdir()


def cache_file(tmp: Path, world: World) -> None:
    (tmp / "cache").write_text("a file where the cache goes\n")


def git_env(name: str, value: str):
    return {name: value}


# -- the tables ---------------------------------------------------------------------------------------------
FLAGS = [
    Kind("flags", "unknown flag", commits("--frobnicate"), 2, "unrecognized arguments: --frobnicate"),
    Kind("flags", "jobs not a number", commits(jobs="two"), 2, "invalid int value"),
    Kind("flags", "jobs zero", commits(jobs="0"), 2, "run.jobs: must be at least 1"),
    Kind("flags", "jobs absurd", commits(jobs="1000000"), 2, "run.jobs: must be at most 1024"),
    Kind("flags", "mode unknown", commits(mode="weekly"), 2, "invalid choice: 'weekly'"),
    Kind("flags", "repeats zero", commits(repeats="0"), 2, "repeats must be >= 1"),
    Kind("flags", "repeats huge", commits(repeats="5000", max_repeats="5000"), 2, "max_repeats must be at most 1000"),
    Kind("flags", "repeats above max", commits(repeats="4", max_repeats="2"), 2, "repeats must be >= 1 and <= max_repeats"),
    Kind("flags", "threshold nan", releases(probe_cmd=None, metric="m", threshold="nan", probe="ga_memory"), 2,
         "must be a finite number, not nan"),
    Kind("flags", "threshold inf", releases(metric="m", threshold="inf", probe_cmd=None, probe="ga_memory"), 2,
         "must be a finite number, not inf"),
    Kind("flags", "noise negative", commits(noise="-1"), 2, "noise must be >= 0"),
    Kind("flags", "noise nan", commits(noise="nan"), 2, "must be a finite number, not nan"),
    Kind("flags", "timeout zero", commits(timeout="0"), 2, "timeout must be positive"),
    Kind("flags", "timeout nan", commits(timeout="nan"), 2, "must be a finite number, not nan"),
    Kind("flags", "timeout inf", commits(timeout="inf"), 2, "must be a finite number, not inf"),
    Kind("flags", "alpha without stats", commits(alpha="0.01"), 2, "alpha is for compare = stats"),
    Kind("flags", "min-effect without stats", commits(min_effect="5%"), 2, "min_effect is for compare = stats"),
    Kind("flags", "both stats settings without stats", commits(min_effect="5%", alpha="0.01"), 2,
         "min_effect and alpha are for compare = stats"),
    Kind("flags", "stats alpha out of range", releases(probe_cmd=None, probe="ga_memory", metric="m", compare="stats",
                                                       alpha="0.9"), 2, "alpha must be between 0 and 0.5"),
    Kind("flags", "stats with fewer pairs than a verdict needs",
         releases(probe_cmd=None, probe="ga_memory", metric="m", compare="stats", max_repeats="6"), 2,
         "needs at least 8 pairs"),
    Kind("flags", "stats with a threshold", releases(probe_cmd=None, probe="ga_memory", metric="m", compare="stats",
                                                     threshold="1"), 2, "give min_effect, not threshold"),
    Kind("flags", "stats with an exit-code probe", commits(metric="m", compare="stats"), 2,
         "an exit-code probe has none"),
    Kind("flags", "stats with find-fix", releases("--find-fix", probe_cmd=None, probe="ga_memory", metric="m",
                                                  compare="stats"), 2, "find_fix is not supported"),
    Kind("flags", "stats min-effect not a size", releases(probe_cmd=None, probe="ga_memory", metric="m",
                                                          compare="stats", min_effect="big"), 2, "not a percentage"),
    Kind("flags", "max-increase not a size", releases(probe_cmd=None, probe="ga_memory", metric="m",
                                                      max_increase="lots"), 2, "not a percentage"),
    Kind("flags", "two rules", releases("--auto", probe_cmd=None, probe="ga_memory", metric="m", threshold="1"), 2,
         "give only one of threshold, max_increase, max_change, auto"),
    Kind("flags", "a rule without a metric", commits(threshold="1"), 2, "a threshold rule needs a metric"),
    Kind("flags", "direction unknown", commits(direction="sideways"), 2, "invalid choice: 'sideways'"),
    Kind("flags", "index url javascript", commits(index_url="javascript:alert(1)"), 2,
         "'javascript:alert(1)' is not an http(s):// or file:// URL"),
    Kind("flags", "index url ftp", releases(index_url="ftp://127.0.0.1/simple"), 2, "is not an http(s):// or file://"),
    Kind("flags", "index url with credentials and a bad scheme",
         releases(index_url=f"gopher://user:{URL_SECRET}@127.0.0.1/"), 2, "gopher://***@127.0.0.1/"),
    Kind("flags", "index url a file index", releases(index_url="file:///nonexistent/simple"), 2,
         "is a file index; an HTTP(S) simple API is needed"),
    Kind("flags", "repo url not web", commits(repo_url="file:///x"), 2, "job.repo_url: must be an http(s) URL"),
    Kind("flags", "repo url with a space", commits(repo_url="https://exa mple.com/x"), 2, "job.repo_url: must be"),
    Kind("flags", "ray address unparsable", commits(executor="ray", ray_address="a:b:c"), 2, "is not a Ray address"),
    Kind("flags", "ray address port out of range", commits(executor="ray", ray_address="127.0.0.1:99999"), 2,
         "is not a Ray address"),
    Kind("flags", "ray address unreachable", commits(executor="ray", ray_address="127.0.0.1:9"), 2,
         "no Ray cluster answers at 127.0.0.1:9"),
    Kind("flags", "ray address without ray", commits(ray_address="127.0.0.1:6379"), 2,
         'ray_address is only used with executor = "ray"'),
    Kind("flags", "executor unknown", commits(executor="cluster"), 2, "invalid choice: 'cluster'"),
    Kind("flags", "env backend unknown", commits(env_backend="conda"), 2, "invalid choice: 'conda'"),
    Kind("flags", "env spec missing", commits(env="/no/such/spec.toml"), 2, "not found"),
    Kind("flags", "env spec not TOML", commits(env="{tmp}/spec.toml"), 2, "not valid TOML",
         files={"spec.toml": "base = [\n"}),
    Kind("flags", "with a range", commits(with_="tinydep>=1"), 2, "must pin one version"),
    Kind("flags", "with the package itself", releases(with_="TinyPkg==1.0.0"), 2, "the package under test"),
    Kind("flags", "with a package not on the index", releases(with_="nosuchdep==1.0"), 2,
         "--with nosuchdep==1.0: package 'nosuchdep' not found"),
    Kind("flags", "with a version not on the index", releases(with_="tinydep==9.9"), 2,
         "--with tinydep==9.9: version 9.9 does not exist (nearest: 1.0)"),
    Kind("flags", "with a torch not on the index", releases("--with", "torch==0.0.1"), 2,
         "--with torch==0.0.1: package 'torch' not found"),
    Kind("flags", "package name with a space", commits(package="tiny pkg"), 2, "not a valid package name"),
    Kind("flags", "package name a path", commits(package="../etc"), 2, "not a valid package name"),
    Kind("flags", "good empty", commits(good=""), 2, "job.good: must not be empty"),
    Kind("flags", "bad blank", commits(bad="   "), 2, "job.bad: must not be empty"),
    Kind("flags", "probe unknown", releases(probe_cmd=None, probe="no_such_probe"), 2, "unknown probe 'no_such_probe'"),
    Kind("flags", "probe a path outside", releases(probe_cmd=None, probe="../../etc/passwd"), 2, "not found"),
    Kind("flags", "probe script missing", releases(probe_cmd=None, probe="/no/probe.py"), 2,
         "probe script /no/probe.py not found"),
    Kind("flags", "probe cmd empty", commits(probe_cmd=""), 2, "give exactly one of name, path, cmd"),
    Kind("flags", "probe cmd with a semicolon", commits(probe_cmd="true;"), 2, "has shell syntax (';')"),
    Kind("flags", "probe cmd with a pipe", commits(probe_cmd="true | cat"), 2, "has shell syntax ('|')"),
    Kind("flags", "probe cmd with a redirect", commits(probe_cmd="true > out"), 2, "has shell syntax ('>')"),
    Kind("flags", "probe cmd with a substitution", commits(probe_cmd="echo $(id)"), 2, "has shell syntax ('(')"),
    Kind("flags", "probe cmd with an and", commits(probe_cmd="true && true"), 2, "has shell syntax ('&&')"),
    Kind("flags", "probe cmd unparsable", commits(probe_cmd='python -c "unbalanced'), 2,
         "--probe-cmd cannot be parsed: No closing quotation"),
    Kind("flags", "probe cmd relative path", commits(probe_cmd="./repro.sh"), 2, "give ./repro.sh as an absolute path"),
    Kind("flags", "probe cmd missing absolute", commits(probe_cmd="/no/such/binary"), 2,
         "/no/such/binary is not an executable file"),
    Kind("flags", "probe cmd not executable", commits(probe_cmd="{tmp}/repro.sh"), 2, "is not an executable file",
         files={"repro.sh": "#!/bin/sh\nexit 0\n"}),
    Kind("flags", "probe and probe cmd", commits(probe="ga_memory"), 2, "give exactly one of name, path, cmd"),
    Kind("flags", "probe arg not a number", releases("--probe-arg=--sizes=abc", probe_cmd=None, probe="ga_memory"), 2,
         "argument --sizes: invalid _ints value: 'abc'"),
    Kind("flags", "probe arg unknown", releases("--probe-arg=--frobnicate", probe_cmd=None, probe="ga_memory"), 2,
         "unrecognized arguments: --frobnicate"),
    Kind("flags", "probe arg model shape unknown", releases("--probe-arg=--model-config=nosuch", probe_cmd=None,
                                                            probe="ga_memory"), 2, "is neither a known shape"),
    Kind("flags", "probe arg heads not dividing", releases("--probe-arg=--heads=3", probe_cmd=None, probe="ga_memory"),
         2, "every size must be divisible by --heads 3"),
    Kind("flags", "probe arg a million layers", releases("--probe-arg=--layers=1000000", probe_cmd=None,
                                                         probe="ga_memory"), 2, "GiB of memory is available"),
    Kind("flags", "probe arg sequences beyond memory",
         releases("--probe-arg=--seq-lens=200000", "--probe-arg=--max-positions=200000", probe_cmd=None,
                  probe="ga_memory"), 2, "GiB of activations"),
    Kind("flags", "probe arg a huge batch", releases("--probe-arg=--batch=100000000", probe_cmd=None, probe="ga_memory"),
         2, "GiB of memory is available"),
    Kind("flags", "cache dir a file", commits(), 2, "cache directory", setup=cache_file),
    Kind("flags", "cache dir under a file", commits(cache_dir="{tmp}/f/cache"), 2, "is not a directory",
         files={"f": "x"}),
    Kind("flags", "store a directory", commits(), 2, "is a directory (--store names the SQLite file)", setup=store_dir),
    Kind("flags", "store under a file", commits(store="{tmp}/f/s.db"), 2, "is not a directory", files={"f": "x"}),
    Kind("flags", "config /dev/zero", ["run", "--config", "/dev/zero", "--store", "{tmp}/s.db"], 2,
         "/dev/zero: not a regular file"),
    Kind("flags", "config a directory", ["run", "--config", "{tmp}", "--store", "{tmp}/s.db"], 2, "not a regular file"),
    Kind("flags", "config missing", ["run", "--config", "{tmp}/none.toml"], 2, "file not found"),
    Kind("flags", "config too large", toml(""), 2, "larger than 1 MiB", files={"bisect.toml": "# x\n" * 300000}),
    Kind("flags", "config not text", toml(""), 2, "not valid TOML", files={"bisect.toml": "\udcff"}),
    Kind("flags", "resume with a flag it would ignore",
         ["run", "--resume", "feedface", "--package", "x", "--store", "{tmp}/s.db"], 2, "--package would change it",
         setup=store_with_a_job),
    Kind("flags", "resume with a probe argument",
         ["run", "--resume", "feedface", "--probe-arg=--seed=2", "--store", "{tmp}/s.db"], 2, "--args would change it",
         setup=store_with_a_job),
    Kind("flags", "resume with a config file",
         ["run", "--resume", "feedface", "--config", "{tmp}/b.toml", "--store", "{tmp}/s.db"], 2,
         "--config would change it", setup=store_with_a_job),
    Kind("flags", "resume without a store", ["run", "--resume", "--store", "{tmp}/s.db"], 2, "no store at"),
    Kind("flags", "resume an unknown run", ["run", "--resume", "feedface", "--store", "{tmp}/s.db"], 2,
         "no bisect run or config hash 'feedface'", setup=valid_store),
    Kind("flags", "commits without a repo", commits(repo=None), 2, "--mode commits needs --repo"),
    Kind("flags", "torch by commits", commits(package="torch"), 2, "torch is bisected by release"),
    Kind("flags", "a stray word", commits("stray"), 2, "unrecognized arguments: stray"),
    Kind("flags", "probe-arg without a value", ["run", "--probe-arg"], 2, "expected one argument"),
]

COMMANDS = [
    Kind("commands", "log of a wildcard id", ["log", "%", "--store", "{tmp}/s.db"], 2, "no run '%'", setup=valid_store),
    Kind("commands", "log of an underscore id", ["log", "run000_", "--store", "{tmp}/s.db"], 2, "no run 'run000_'",
         setup=valid_store),
    Kind("commands", "log of a huge id", ["log", "9" * 100000, "--store", "{tmp}/s.db"], 2, "no run '99999",
         setup=valid_store),
    Kind("commands", "report of a wildcard id", ["report", "%", "--store", "{tmp}/s.db"], 2, "no run '%'",
         setup=valid_store),
    Kind("commands", "report of an unknown id", ["report", "nope", "--store", "{tmp}/s.db"], 2, "no run 'nope'",
         setup=valid_store),
    Kind("commands", "report in an unknown format", ["report", "--format", "pdf", "--store", "{tmp}/s.db"], 2,
         "invalid choice: 'pdf'"),
    Kind("commands", "runs of a missing store", ["runs", "--store", "{tmp}/none/s.db"], 2, "no store at"),
    Kind("commands", "log of a missing store", ["log", "--store", "{tmp}/none/s.db"], 2, "no store at"),
    Kind("commands", "envs gc without limits", ["envs", "gc", "--cache-dir", "{tmp}/cache"], 2, "needs --keep-last"),
    Kind("commands", "envs gc with a bad size", ["envs", "gc", "--max-size", "lots", "--cache-dir", "{tmp}/cache"], 2,
         "is not a size"),
    Kind("commands", "envs gc keeping a negative number", ["envs", "gc", "--keep-last", "-1", "--cache-dir",
                                                          "{tmp}/cache"], 2, "--keep-last must be >= 0"),
    Kind("commands", "envs list of a missing cache", ["envs", "list", "--cache-dir", "{tmp}/cache"], 0,
         "no environments (no cache directory at"),
    Kind("commands", "envs list of a file", ["envs", "list"], 2, "is not a directory", setup=cache_file,
         env={"BISECTOR_CACHE_DIR": "{tmp}/cache"}),
    Kind("commands", "store check of a missing store", ["store", "check", "--store", "{tmp}/s.db"], 2, "no store at"),
    Kind("commands", "store check of a foreign file", ["store", "check", "--store", "{tmp}/s.db"], 2,
         "cannot be read as an SQLite database", setup=foreign_store),
    Kind("commands", "store recover over an existing file", ["store", "recover", "--store", "{tmp}/s.db", "--out",
                                                             "{tmp}/f"], 2, "exists; name a new file",
         files={"f": "x"}, setup=damaged_store),
    Kind("commands", "store unknown action", ["store", "fix"], 2, "invalid choice: 'fix'"),
    Kind("commands", "probe with a range", ["probe", "--with", "tinydep>=1", "--store", "{tmp}/s.db"], 2,
         "must pin one version"),
    Kind("commands", "probe of a version not on the index", ["probe", "--with", "tinypkg==7.0", "--index-url", "{index}",
                                                             "--store", "{tmp}/s.db"], 2, "version 7.0 does not exist"),
    Kind("commands", "probe into a store that is a directory", ["probe", "--with", "tinypkg==1.0.0", "--index-url",
                                                                "{index}", "--store", "{tmp}/s.db"], 2,
         "is a directory", setup=store_dir),
    Kind("commands", "probe with a cache that is a file", ["probe", "--with", "tinypkg==1.0.0", "--index-url", "{index}",
                                                           "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache"], 2,
         "cache directory", setup=cache_file),
    Kind("commands", "probe with a bad probe argument", ["probe", "--with", "tinypkg==1.0.0", "--index-url", "{index}",
                                                         "--probe-arg=--sizes=x", "--store", "{tmp}/s.db"], 2,
         "invalid _ints value"),
    Kind("commands", "diff of A and B the same", ["diff", "--with", "tinypkg==1.0.0", "--index-url", "{index}",
                                                  "--store", "{tmp}/s.db"], 2, "A and B"),
    Kind("commands", "diff of a missing lock file", ["diff", "--with", "tinypkg==1.0.0", "--a-lock", "{tmp}/none.txt",
                                                     "--store", "{tmp}/s.db"], 2, "none.txt"),
    Kind("commands", "matrix without a config", ["matrix", "--store", "{tmp}/s.db"], 2, "no matrix config"),
    Kind("commands", "matrix of a file without [matrix]", ["matrix", "--config", "{tmp}/bisect.toml"], 2,
         "no [matrix] table", files={"bisect.toml": "[job]\n"}),
]

MATRIX_TOML = ('[matrix]\nindex_url = "{index}"\nenv = "{spec}"\n[matrix.grid]\ntinypkg = ["1.0.0", "1.2.0"]\n'
               '[probe]\ncmd = "true"\n')
MATRIX = [
    Kind("matrix", "a version that does not exist", ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db",
                                                     "--out", "{tmp}/out"], 2, "9.9.9",
         files={"m.toml": MATRIX_TOML.replace('"1.2.0"', '"9.9.9"')}),
    Kind("matrix", "an out directory that is a file", ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db",
                                                       "--out", "{tmp}/f"], 2, "--out", files={"m.toml": MATRIX_TOML,
                                                                                                "f": "x"}),
    Kind("matrix", "an html directory under a file", ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db",
                                                      "--out", "{tmp}/out", "--html", "{tmp}/f/html"], 2,
         "is not a directory", files={"m.toml": MATRIX_TOML, "f": "x"}),
    Kind("matrix", "stats mode", ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db"], 2,
         "compare = stats is for bisects",
         files={"m.toml": MATRIX_TOML + '[criterion]\nmetric = "m"\ncompare = "stats"\n'}),
    Kind("matrix", "a store that is a directory", ["matrix", "--config", "{tmp}/m.toml", "--out", "{tmp}/out"], 2,
         "is a directory", files={"m.toml": MATRIX_TOML + '[run]\nstore = "{tmp}/s.db"\n'}, setup=store_dir),
    Kind("matrix", "an unparsable probe command", ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db"], 2,
         "cannot be parsed", files={"m.toml": MATRIX_TOML.replace('cmd = "true"', "cmd = 'x \"y'")}),
]

CONFIG = [
    config_kind("not TOML", "[criterion\n", "not valid TOML"),
    config_kind("unknown key", "[criterion]\ncolour = 'red'\n", "criterion.colour: unknown key"),
    config_kind("unknown table", "[jbo]\nx = 1\n", "jbo: unknown key"),
    config_kind("threshold a boolean", "[criterion]\nmetric = 'm'\nthreshold = true\n",
                "criterion.threshold: must be a number, not true", probe='[probe]\nname = "ga_memory"\n'),
    config_kind("threshold a string", "[criterion]\nmetric = 'm'\nthreshold = '1'\n",
                'criterion.threshold: must be a number, not "1"', probe='[probe]\nname = "ga_memory"\n'),
    config_kind("threshold nan", "[criterion]\nmetric = 'm'\nthreshold = nan\n", "must be a finite number, not nan",
                probe='[probe]\nname = "ga_memory"\n'),
    config_kind("noise a boolean", "[criterion]\nnoise = false\n", "criterion.noise: must be a number, not false"),
    config_kind("repeats a boolean", "[criterion]\nrepeats = true\n", "criterion.repeats: must be a number, not true"),
    config_kind("repeats a string", "[criterion]\nrepeats = '3'\n", 'criterion.repeats: must be a number, not "3"'),
    config_kind("repeats absurd", "[criterion]\nrepeats = 10\nmax_repeats = 1000000000\n",
                "max_repeats must be at most 1000"),
    config_kind("repeats fractional", "[criterion]\nrepeats = 2.5\n", "criterion.repeats"),
    config_kind("timeout nan", "", "probe.timeout: must be a finite number, not nan",
                probe='[probe]\ncmd = "true"\ntimeout = nan\n'),
    config_kind("timeout inf", "", "probe.timeout: must be a finite number, not inf",
                probe='[probe]\ncmd = "true"\ntimeout = inf\n'),
    config_kind("timeout a boolean", "", "probe.timeout: must be a number, not true",
                probe='[probe]\ncmd = "true"\ntimeout = true\n'),
    config_kind("timeout negative", "", "timeout must be positive", probe='[probe]\ncmd = "true"\ntimeout = -1\n'),
    config_kind("alpha a boolean", "[criterion]\nmetric = 'm'\ncompare = 'stats'\nalpha = true\n",
                "criterion.alpha: must be a number, not true", probe='[probe]\nname = "ga_memory"\n'),
    config_kind("jobs a boolean", "[run]\njobs = true\n", "run.jobs: must be a number, not true"),
    config_kind("jobs a string", "[run]\njobs = 'many'\n", 'run.jobs: must be a number, not "many"'),
    config_kind("jobs fractional", "[run]\njobs = 2.5\n", "run.jobs"),
    config_kind("mode a number", "", "job.mode", job='[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "1.2"\nmode = 7\n'),
    config_kind("pins a string", "", "job.pins",
                job='[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "1.2"\npins = "tinydep==1.0"\n'),
    config_kind("probe args a string", "", "probe.args", probe='[probe]\ncmd = "true"\nargs = "--x"\n'),
    config_kind("two probe kinds", "", "give exactly one of name, path, cmd, command (got name, cmd)",
                probe='[probe]\nname = "ga_memory"\ncmd = "true"\n'),
    config_kind("min effect without stats", "[criterion]\nmin_effect = '5%'\n", "min_effect is for compare = stats"),
    config_kind("stats with too few pairs", "[criterion]\nmetric = 'm'\ncompare = 'stats'\nmax_repeats = 4\n",
                "needs at least 8 pairs", probe='[probe]\nname = "ga_memory"\n'),
    config_kind("stats at a looser alpha with too few pairs",
                "[criterion]\nmetric = 'm'\ncompare = 'stats'\nalpha = 0.01\nrepeats = 2\nmax_repeats = 4\n",
                "at alpha 0.01 needs at least 5 pairs", probe='[probe]\nname = "ga_memory"\n'),
    config_kind("ray address without ray", "[run]\nray_address = 'auto'\n", 'ray_address is only used with executor'),
    config_kind("ray address unparsable", "[run]\nexecutor = 'ray'\nray_address = '::::'\n", "is not a Ray address"),
    config_kind("index url javascript", "", "job.index_url: 'javascript:x'",
                job='[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "1.2"\nindex_url = "javascript:x"\n'),
    config_kind("repo url ftp", "", "job.repo_url: must be an http(s) URL",
                job=JOB_TOML + 'repo_url = "ftp://example.com/x"\n'),
    config_kind("a NUL byte", "", "a value holds a NUL byte", probe='[probe]\ncmd = "true"\nargs = ["a\\u0000b"]\n'),
    config_kind("nested too deeply", "x = " + "[" * 50000 + "]" * 50000 + "\n", "nested more than 64 deep"),
    config_kind("duplicate keys", "[run]\njobs = 1\njobs = 2\n", "not valid TOML"),
    config_kind("contrast without args", "[contrast]\nlabel = 'x'\n", "contrast.args"),
    config_kind("another package without its range", "", "give good and bad for tinydep",
                job='[job]\npackage = "tinydep"\n'),
    config_kind("good empty", "", "job.good: must not be empty",
                job='[job]\npackage = "tinypkg"\ngood = ""\nbad = "1.2"\n'),
    config_kind("direction unknown", "[criterion]\ndirection = 'sideways'\n", "criterion.direction"),
    config_kind("max increase nan", "[criterion]\nmetric = 'm'\nmax_increase = 'nan%'\n", "not a percentage",
                probe='[probe]\nname = "ga_memory"\n'),
    Kind("config", "store a number", ["run", "--config", "{tmp}/bisect.toml"], 2, "run.store",
         files={"bisect.toml": JOB_TOML + '[probe]\ncmd = "true"\n[run]\nstore = 5\n'}),
    Kind("config", "cache dir a file", ["run", "--config", "{tmp}/bisect.toml", "--store", "{tmp}/s.db"], 2, "cache directory {tmp}/f is not a directory",
         files={"bisect.toml": JOB_TOML + '[probe]\ncmd = "true"\n[run]\ncache_dir = "{tmp}/f"\n', "f": "x"}),
    config_kind("probe path missing", "", "probe script /no/such.py not found", probe='[probe]\npath = "/no/such.py"\n'),
    config_kind("reference without a title", "[reference]\npackage = 'tinypkg'\nversion = '1'\nsetting = 's'\n",
                "reference.title"),
]

REPOS = [
    Kind("repos", "refs reversed", commits(good="{s7}", bad="{s0}"), 2, "is newer than bad"),
    Kind("repos", "ref unknown", commits(good="v9.9.9"), 2, "unknown ref 'v9.9.9'"),
    Kind("repos", "ref like an option", commits(good="--upload-pack=touch {tmp}/pwned"), 2, "invalid git ref"),
    Kind("repos", "ref with a semicolon", commits(good="v1;touch {tmp}/pwned"), 2, "invalid git ref"),
    Kind("repos", "ref with a substitution", commits(good="$(touch {tmp}/pwned)"), 2, "invalid git ref"),
    Kind("repos", "ref with a space", commits(good="v0.1.0 v0.1.7"), 2, "invalid git ref"),
    Kind("repos", "ref with a control character", commits(good="v0\x01"), 2, "invalid git ref"),
    Kind("repos", "good equals bad", commits(bad="{s0}"), 2, "good and bad name the same commit"),
    Kind("repos", "good equals bad by another name", commits(good="v0.1.0", bad="{s0}"), 2,
         "good and bad name the same commit"),
    Kind("repos", "no shared history", commits(good="{orphan}"), 2, "share no history"),
    Kind("repos", "repo a file", commits(repo="{file}"), 2, "is a file, not a git repository"),
    Kind("repos", "repo a subdirectory", commits(repo="{repo}/tinypkg"), 2, "is a directory inside the git repository"),
    Kind("repos", "repo a plain directory", commits(repo="{plain}"), 2, "not found (no git repository at"),
    Kind("repos", "repo missing", commits(repo="{tmp}/nowhere"), 2, "not found (no such directory)"),
    Kind("repos", "repo empty", commits(repo="{empty}"), 2, "unknown ref"),
    Kind("repos", "repo of another package", commits(package="accelerate"), 2, "builds tinypkg (pyproject.toml at"),
    Kind("repos", "repo like an option", commits(repo=None) + ["--repo=-c"], 2, "invalid repository '-c'"),
    Kind("repos", "GIT_DIR in the environment", commits(), 2, "GIT_DIR is set in the environment",
         env={"GIT_DIR": "{plain}"}),
    Kind("repos", "GIT_WORK_TREE in the environment", commits(), 2, "GIT_WORK_TREE is set", env={"GIT_WORK_TREE": "/"}),
    Kind("repos", "GIT_INDEX_FILE in the environment", commits(), 2, "GIT_INDEX_FILE is set",
         env={"GIT_INDEX_FILE": "{tmp}/idx"}),
    Kind("repos", "GIT_OBJECT_DIRECTORY in the environment", commits(), 2, "GIT_OBJECT_DIRECTORY is set",
         env={"GIT_OBJECT_DIRECTORY": "{tmp}"}),
    Kind("repos", "a URL with a bad ref (no network)", commits(repo="https://127.0.0.1:9/x.git", good="a b"), 2,
         "invalid git ref"),
    Kind("repos", "auto mode with a repo of another package", releases(package="tinydep", good="1.0", bad="1.0",
                                                                       mode="auto", repo="{repo}"), 2,
         "builds tinypkg"),
    Kind("repos", "auto mode with a repo that is a file", releases(mode="auto", repo="{file}"), 2, "is a file"),
]

STORES = [
    Kind("stores", "a foreign file is refused for a run", commits(), 2, "not a usable bisector store",
         setup=foreign_store),
    Kind("stores", "a truncated file is refused for a run", commits(), 2, "not a usable bisector store",
         setup=truncated_store),
    Kind("stores", "a damaged store is refused for a run", commits(), 2, "bisector store recover", setup=damaged_store),
    Kind("stores", "a damaged store is refused for a probe", ["probe", "--with", "tinypkg==1.0.0", "--index-url",
                                                             "{index}", "--store", "{tmp}/s.db", "--cache-dir",
                                                             "{tmp}/cache"], 2, "is damaged", setup=damaged_store),
    Kind("stores", "a damaged store listed", ["runs", "--store", "{tmp}/s.db"], 2, "is damaged", setup=damaged_store),
    Kind("stores", "a damaged store's log", ["log", "--store", "{tmp}/s.db"], 2, "is damaged",
         setup=damaged_store),
    Kind("stores", "a damaged store's report", ["report", "--store", "{tmp}/s.db"], 2, "is damaged",
         setup=damaged_store),
    Kind("stores", "a damaged store checked", ["store", "check", "--store", "{tmp}/s.db"], 1,
         "is damaged: database disk image is malformed", setup=damaged_store),
    Kind("stores", "a store of another version", commits(), 2, "store version 99, expected 1", setup=future_store),
    Kind("stores", "a store of another version listed", ["runs", "--store", "{tmp}/s.db"], 2, "store version 99",
         setup=future_store),
    Kind("stores", "a foreign file listed", ["runs", "--store", "{tmp}/s.db"], 2, "not a usable bisector store",
         setup=foreign_store),
    Kind("stores", "a sound store checked", ["store", "check", "--store", "{tmp}/s.db"], 0, "ok (3 runs, 0 measurements",
         setup=valid_store),
]

TABLE = FLAGS + COMMANDS + MATRIX + CONFIG + REPOS + STORES


# -- running a kind -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-world")
    with local_index(root).serve() as url:
        yield build_world(root, url)


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every file and directory under ``root`` (SQLite's own -wal/-shm files aside) with its size and mtime."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.name.endswith(("-wal", "-shm")):
            continue
        st = path.lstat()
        out[str(path.relative_to(root))] = (path.is_dir(), st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


def _rows(store: Path) -> tuple:
    if not store.is_file():
        return ()
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        return tuple(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "measurements", "steps"))
    except sqlite3.DatabaseError as exc:
        return (str(exc),)


def _no_secret(text: str) -> None:
    for value in [*SECRET_ENV.values(), URL_SECRET]:
        assert value not in text, f"a planted secret was printed: {text[:2000]}"


@pytest.mark.parametrize("kind", TABLE, ids=lambda k: k.id)
def test_hostile_kind(kind: Kind, world: World, tmp_path, monkeypatch, capsys):
    run_kind(kind, world, tmp_path, monkeypatch, capsys)


def run_kind(kind: Kind, world: World, tmp_path, monkeypatch, capsys) -> str:
    """Run one kind and check what every kind must hold (see the module); the one line it printed."""
    tmp = tmp_path / "kind"
    (tmp / "cwd").mkdir(parents=True)
    for rel, text in kind.files.items():
        (tmp / rel).write_text(world.fill(text, tmp), errors="surrogateescape")
    if kind.setup:
        kind.setup(tmp, world)
    monkeypatch.chdir(tmp / "cwd")
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp / "user-cache"))
    for name, value in {**SECRET_ENV, **kind.env}.items():
        monkeypatch.setenv(name, world.fill(value, tmp))
    before, rows = _snapshot(tmp), _rows(tmp / "s.db")
    try:
        code = main([world.fill(a, tmp) for a in kind.argv])
    except SystemExit as exc:   # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    said = (out + err).strip()
    assert code == kind.code, said
    assert "Traceback" not in said and len(said.splitlines()) == 1, said
    assert world.fill(kind.message, tmp) in said, said
    assert _snapshot(tmp) == before, "something was created or changed"
    assert _rows(tmp / "s.db") == rows, "something was stored"
    assert children_of(os.getpid()) == [], "a process was left behind"
    _no_secret(out + err)
    return said


# -- kinds that need real probes: processes, signals, secrets ----------------------------------------------
SLOW_KINDS = []   # filled below, one entry per kind the slow tests cover (counted by the test above)


def _slow(klass: str, name: str):
    kind = Kind(klass, name, [])
    if kind.id not in {k.id for k in SLOW_KINDS}:   # the slow file may be imported twice (by pytest, by the count)
        SLOW_KINDS.append(kind)
    return name


LEAVER = '''"""An exit-code probe (BAD from the planted commit on) that leaves processes behind, the way {how}."""
import os, signal, subprocess, sys, time
import tinypkg

MARK, HOW = sys.argv[1], sys.argv[2]
SLEEP = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)", MARK]


def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, SLEEP)
        os._exit(0)
    time.sleep(0.2)


if HOW == "child":
    subprocess.Popen(SLEEP)
elif HOW == "grandchild":
    subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:])", *SLEEP]).wait()
elif HOW == "daemon":
    daemon()
elif HOW == "pipe-holder":
    subprocess.Popen(SLEEP, stdout=sys.stdout, stderr=sys.stderr)
elif HOW == "own-group":
    subprocess.Popen(SLEEP, process_group=0)
elif HOW == "fifty":
    for _ in range(50):
        subprocess.Popen(SLEEP)
elif HOW in ("hang", "signal"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    subprocess.Popen(SLEEP)
    daemon()
    print("probe-started", flush=True)
    time.sleep(600)
elif HOW == "crash":
    daemon()
    os.kill(os.getpid(), signal.SIGSEGV)   # a crash is a SKIP in the exit-code contract (an exit of 1-127 is BAD)
sys.exit(1 if tinypkg.BUFFER_KIB > 200 else 0)
'''


def _bisector(argv: list[str], tmp: Path, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bisector", *argv], cwd=tmp, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, **popen)


def _leftovers(marker: str, within: float = 15.0) -> list[str]:
    """The processes still holding ``marker`` once they had ``within`` seconds to go (init reaps late)."""
    end = time.monotonic() + within
    while (found := processes_with(marker)) and time.monotonic() < end:
        time.sleep(0.1)
    return found


def _leaver_run(world: World, tmp: Path, how: str, cache: Path, *extra: str):
    marker = f"hostile-{uuid.uuid4().hex}"
    probe = tmp / "leaver.py"
    probe.write_text(LEAVER.replace("{how}", how))
    return marker, [world.fill(a, tmp) for a in commits(*extra, probe_cmd=f"python {probe} {marker} {how}",
                                                        cache_dir=str(cache))]


LEFT_BEHIND = ["child", "grandchild", "daemon", "pipe-holder", "own-group", "fifty"]


BAD_PROBES = {
    "a command that does not exist": ("nosuchbinary-xyz", "is neither in the environment's bin nor on PATH"),
    "a command that always skips": ("python -c 'raise SystemExit(125)'", "exit 125"),
    "a metric probe that crashes": ("!import sys; sys.exit('boom: the probe crashed')", "boom: the probe crashed"),
    "a result that is not JSON": ("!open(__import__('os').environ['BISECTOR_RESULT'], 'w').write('{not json')",
                                  "invalid probe result"),
    "a result of 20 MB": ("!import json, os; json.dump({'metrics': {'buffer_kib': 1.0}, 'blob': 'x' * 20_000_000}, "
                          "open(os.environ['BISECTOR_RESULT'], 'w'))", "over the 8 MiB bisector reads"),
    "a metric that is not finite": ("!import json, os; open(os.environ['BISECTOR_RESULT'], 'w').write("
                                    "'{\"metrics\": {\"buffer_kib\": NaN}}')", "non-finite metric values: buffer_kib"),
    "a result without metrics": ("!import json, os; json.dump({'note': 1}, open(os.environ['BISECTOR_RESULT'], 'w'))",
                                 "a JSON object with a 'metrics' object"),
    "a probe that exits 0 without a result": ("!pass", "without writing a result"),
}


_slow("probes", "a probe that floods stdout and stderr")


SECRETS = {   # where each planted secret goes in (a kind each); none may come out anywhere
    "--repo-url credentials": "repoUrlPw51",
    "--index-url credentials": "indexUrlPw52",
    "--probe-arg token": "hf_" + "F" * 34,
    "bisect.toml probe args token": "ghp_" + "T" * 36,
    "bisect.toml repo_url credentials": "tomlUrlPw53",
    "HF_TOKEN in the environment": SECRET_ENV["HF_TOKEN"],
    "GITHUB_TOKEN in the environment": SECRET_ENV["GITHUB_TOKEN"],
    "AWS_SECRET_ACCESS_KEY in the environment": SECRET_ENV["AWS_SECRET_ACCESS_KEY"],
    "an API key in the environment": SECRET_ENV["MY_SERVICE_API_KEY"],
    "UV_INDEX_URL credentials in the environment": "uvIndexPw54",
    "an AWS key id on the probe's stdout": "AKIA" + "Z" * 16,
    "an Authorization header on the probe's stderr": "bearerSecret55",
    "a GitHub token in the probe's result": "github_pat_" + "P" * 40,
    "a private key in the probe's result": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "a token in the probe's error message": "hf_" + "E" * 34,
}
SECRET_PROBE = '''import importlib.metadata, json, os, sys
import tinypkg
print(dict(os.environ))                                    # every variable, secrets included
print("aws key AKIA{aws}")
print("Authorization: Bearer {bearer}", sys.argv, __file__, file=sys.stderr)
if importlib.metadata.version("tinypkg") == "0.1.3":
    raise RuntimeError("the hub refused token {error_token}")
json.dump({{"metrics": {{"buffer_kib": float(getattr(tinypkg, "BUFFER_KIB", 100))}}, "note": "pushed with {pat}",
           "key": "-----BEGIN PRIVATE KEY----- {pem} -----END PRIVATE KEY-----", "home": __file__}},
          open(os.environ["BISECTOR_RESULT"], "w"))
'''


def _store_text(path: Path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return "\n".join(str(row) for t in tables for row in db.execute(f"SELECT * FROM {t}"))


for _name in [*SECRETS, "the home directory in paths"]:
    _slow("secrets", _name)


# -- stores under stress: a read-only directory, a full disk, an unclean end, a recovery ------------------
@pytest.fixture
def mounted(tmp_path):
    """A tmpfs of 1 MiB at tmp_path/m (root only; skipped where mounting is not allowed), unmounted after."""
    point = tmp_path / "m"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


_slow("stores", "a store in a read-only directory is listed")
_slow("stores", "a store in a read-only directory is refused for a run")


_slow("disk", "the store's disk fills up during a run")


_slow("stores", "a store left open by kill -9 is integrity-checked on the next open")
_slow("stores", "a store changed behind bisector's back is integrity-checked")


_slow("stores", "a damaged store recovered in place")
_slow("concurrency", "store recover while another process has the store open")


# round 4's kinds (issue 34) and round 5's (issue 47) live in files of their own, each listing its kinds in
# BATTERY; they are counted here
ROUND_4 = ("test_refuse_early", "test_foreign_text_lines", "test_safe_destinations", "test_store_damaged_rows",
           "test_probe_results_hostile", "test_hostile_text", "test_without_git")
ROUND_5 = ("tests.process.test_hostile_round5", "tests.process.test_index_answers", "tests.unit.test_command_words",
           "tests.process.test_gpu_first_signals", "tests.slow.test_command_words_real")


def battery_kinds() -> list[str]:
    """Every kind of the battery, ``class: name``: the tables above, the slow kinds, round 4's and 5's files."""
    import importlib
    home = importlib.import_module("tests.process.test_hostile")   # (pytest may have imported this file by
    importlib.import_module("tests.slow.test_hostile_real")        # another name; the slow kinds register there)
    files = [f"tests.process.{name}" for name in ROUND_4] + list(ROUND_5)
    return [k.id for k in home.TABLE + home.SLOW_KINDS] + [k for name in files
                                                           for k in importlib.import_module(name).BATTERY]


def test_the_battery_has_at_least_150_kinds():
    kinds = battery_kinds()
    assert len({k.id for k in TABLE}) == len(TABLE) and len(set(kinds)) == len(kinds) and len(kinds) >= 310, len(kinds)


def test_the_docs_give_the_battery_s_count():
    """docs/reliability.md and the README say how many kinds the battery tries: the number it has."""
    total = len(battery_kinds())
    assert f"tries {total} kinds" in (ROOT / "docs" / "reliability.md").read_text()
    assert f"tries {total}" in " ".join((ROOT / "README.md").read_text().split())
