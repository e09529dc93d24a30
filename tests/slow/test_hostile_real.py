"""The slow half of tests/process/test_hostile.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import pytest
from bisector.cli.main import main
from bisector.store.storage import Store
from tests.support.hostile import SECRET_ENV, commits, processes_with

from tests.process.test_hostile import BAD_PROBES, LEFT_BEHIND, ROOT, SECRETS, SECRET_PROBE, _bisector, _damage, _leaver_run, _leftovers, _slow, _store_text, _store_with_runs, mounted, world  # noqa: F401 (helpers and fixtures)


@pytest.mark.parametrize("how", [_slow("processes", f"a probe that leaves a {h}") for h in LEFT_BEHIND])
def test_nothing_a_probe_leaves_behind_outlives_it(how, world, tmp_path, env_cache):
    how = how.removeprefix("a probe that leaves a ")
    marker, argv = _leaver_run(world, tmp_path, how, env_cache, "--json")
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["first_bad"]["sha"] == world.shas[5]   # every step still judged right
    assert _leftovers(marker) == []


@pytest.mark.parametrize("how, why", [(_slow("processes", "a hanging probe with children, past its timeout"), "hang"),
                                      (_slow("processes", "a crashing probe that started a daemon"), "crash")])
def test_a_probe_that_cannot_measure_stops_at_the_endpoints_and_leaves_nothing(how, why, world, tmp_path):
    cache = tmp_path / "cache"
    marker, argv = _leaver_run(world, tmp_path, why, cache, "--timeout", "3")
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("bisector: error: cannot measure either endpoint: ") and err.count("bisector: error") == 1
    assert ("timed out" if why == "hang" else "exit -11") in last
    assert len(list((cache / "envs").iterdir())) == 2   # the endpoints' environments, no inner candidate's
    assert _leftovers(marker) == []


@pytest.mark.parametrize("sig", [_slow("signals", "kill -9 of bisector mid-probe"),
                                 _slow("signals", "SIGTERM of bisector mid-probe"),
                                 _slow("signals", "Ctrl-C of bisector mid-probe")])
def test_a_dying_bisector_takes_its_probe_and_everything_it_started(sig, world, tmp_path, env_cache):
    signum = {"kill": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "Ctrl-C": signal.SIGINT}[sig.split()[0]]
    marker, argv = _leaver_run(world, tmp_path, "signal", env_cache)
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 300
    while len(processes_with(marker)) < 4:   # the launcher, the probe, its child and its daemon are running
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (-9 if signum == signal.SIGKILL else 130), err[-2000:]
    assert _leftovers(marker) == []


@pytest.mark.parametrize("name", [_slow("probes", n) for n in BAD_PROBES])
def test_a_probe_that_measures_nothing_is_one_line_before_any_inner_candidate(name, world, tmp_path):
    cmd, message = BAD_PROBES[name]
    cache = tmp_path / "cache"
    if cmd.startswith("!"):   # a metric probe script
        script = tmp_path / "probe.py"
        script.write_text(cmd[1:] + "\n")
        extra = {"probe_cmd": None, "probe": str(script), "metric": "buffer_kib", "threshold": "200"}
    else:
        extra = {"probe_cmd": cmd}
    argv = [world.fill(a, tmp_path) for a in commits(cache_dir=str(cache), **extra)]
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("bisector: error: cannot measure either endpoint") and message in last, last
    assert "Traceback" not in err and len(list((cache / "envs").iterdir())) <= 2
    steps = sqlite3.connect(tmp_path / "s.db").execute("SELECT count(*) FROM steps").fetchone()[0]
    assert steps == 2
    runs = Store(tmp_path / "s.db", read_only=True).list_runs()
    assert [r.status for r in runs] == ["undecided"]   # not left "running" or "interrupted"


def test_a_flooding_probe_is_bounded(world, tmp_path, env_cache):
    script = tmp_path / "flood.py"
    script.write_text("import sys, tinypkg\nfor _ in range(200000):\n    print('x' * 100)\n"
                      "    print('y' * 100, file=sys.stderr)\nsys.exit(1 if tinypkg.BUFFER_KIB > 200 else 0)\n")
    argv = [world.fill(a, tmp_path) for a in commits("--json", probe_cmd=f"python {script}", cache_dir=str(env_cache))]
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and json.loads(out)["first_bad"]["sha"] == world.shas[5], err[-2000:]
    assert (tmp_path / "s.db").stat().st_size < 2_000_000   # 20 MB of output per probe, a tail of it stored


def test_planted_secrets_come_out_of_no_command(world, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    uv_cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    index = world.index.replace("http://", f"http://carol:{SECRETS['--index-url credentials']}@")
    env = {"HOME": str(home), **({"UV_CACHE_DIR": uv_cache} if uv_cache else {}), **SECRET_ENV,
           "UV_INDEX_URL": world.index.replace("http://", f"http://dave:{SECRETS['UV_INDEX_URL credentials in the environment']}@")}
    probe = home / "probe.py"
    probe.write_text(SECRET_PROBE.format(aws="Z" * 16, bearer=SECRETS["an Authorization header on the probe's stderr"],
                                         error_token=SECRETS["a token in the probe's error message"],
                                         pat=SECRETS["a GitHub token in the probe's result"],
                                         pem=SECRETS["a private key in the probe's result"]))
    (home / "bisect.toml").write_text(
        f'[job]\nrepo_url = "https://erin:{SECRETS["bisect.toml repo_url credentials"]}@git.example.com/t"\n'
        f'[probe]\npath = "{probe}"\nargs = ["--api-key", "{SECRETS["bisect.toml probe args token"]}"]\n'
        '[criterion]\nmetric = "buffer_kib"\nthreshold = 200\n')
    (home / "matrix.toml").write_text(
        f'[matrix]\nindex_url = "{index}"\nenv = "{world.spec}"\n[matrix.grid]\ntinypkg = ["1.0.0", "1.2.0"]\n'
        f'[probe]\npath = "{probe}"\n[criterion]\nmetric = "buffer_kib"\nthreshold = 200\n')
    store, cache = home / "store.db", home / "cache"
    common = ["--store", str(store)]
    run = ["run", "--config", str(home / "bisect.toml"), "--package", "tinypkg", "--mode", "commits", "--repo",
           str(world.repo), "--good", world.shas[0], "--bad", world.shas[7], "--env", str(world.spec),
           "--repo-url", f"https://frank:{SECRETS['--repo-url credentials']}@git.example.com/t",
           f"--probe-arg=--hf-token={SECRETS['--probe-arg token']}", "--cache-dir", str(cache), *common]
    said = []
    for argv in (run, [*run, "--json"], ["log", *common], ["runs", *common], ["report", *common],
                 ["report", "--format", "json", *common], ["report", "--format", "text", *common],
                 ["probe", "--with", "tinypkg==1.0.0", "--index-url", index, "--env", str(world.spec), "--probe",
                  str(probe), "--cache-dir", str(cache), "--json", *common],
                 ["matrix", "--config", str(home / "matrix.toml"), "--out", str(home / "matrix"), "--html",
                  str(home / "html"), "--cache-dir", str(cache), *common]):
        proc = _bisector(argv, home, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (argv[0], err[-3000:], out[-3000:])
        said.append(f"$ {argv[0]}\n{out}\n{err}")
    files = [p for p in home.rglob("*") if p.is_file() and p.suffix in (".md", ".json", ".html")]
    assert {p.suffix for p in files} == {".md", ".json", ".html"}
    everything = {"console": "\n".join(said), "store": _store_text(store),
                  **{str(p.relative_to(home)): p.read_text() for p in files}}
    for where, text in everything.items():
        for name, value in SECRETS.items():
            assert value not in text, f"{name} came out in {where}"
        if not where.startswith("cache"):   # (the environment cache keeps real paths: it is how it finds them)
            assert str(home) not in text, f"the home directory came out in {where}"
    assert "~/probe.py" in everything["console"] and "***@git.example.com" in everything["store"]


def test_a_store_in_a_read_only_directory_is_read_not_written(mounted, tmp_path, capsys):
    _store_with_runs(mounted / "s.db", 3)
    assert subprocess.run(["mount", "-o", "remount,ro", str(mounted)]).returncode == 0
    assert main(["runs", "--store", str(mounted / "s.db")]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 5 and "run0002" in out and out.splitlines()[-1] == "3 run(s): 3 bisect", err
    assert main(["log", "run0001", "--store", str(mounted / "s.db")]) == 0
    capsys.readouterr()
    code = main(["run", "--package", "tinypkg", "--good", "1", "--bad", "2", "--probe-cmd", "true",
                 "--store", str(mounted / "s.db"), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "in a read-only directory" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_a_full_disk_is_one_line_and_the_store_stays_sound(mounted, world, tmp_path, env_cache):
    filler = mounted / "filler"
    store = mounted / "s.db"
    Store(store).close()
    try:   # fill the disk, then leave a few pages: the run starts, and runs out
        with open(filler, "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass
    filler.write_bytes(filler.read_bytes()[:-32768])
    argv = [world.fill(a, tmp_path) for a in commits(store=str(store), cache_dir=str(env_cache),
                                                     probe_cmd=f"python -c 'print(\"x\" * 4000)'")]
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("bisector: error: ") and "full" in last and "Traceback" not in err, err[-2000:]
    filler.unlink()
    assert sqlite3.connect(store).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_store_left_open_by_a_killed_run_is_checked_and_then_resumed(world, tmp_path, env_cache, monkeypatch):
    import bisector.store.storage as storage
    checks = []
    real = storage.integrity_problems
    monkeypatch.setattr(storage, "integrity_problems", lambda db: checks.append(1) or real(db))   # (a spy, not a fake)
    marker, argv = _leaver_run(world, tmp_path, "signal", env_cache)
    proc = _bisector(argv, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 300
    while len(processes_with(marker)) < 4:
        assert proc.poll() is None and time.monotonic() < end
        time.sleep(0.1)
    proc.kill()
    proc.communicate(timeout=60)
    lock = tmp_path / "s.db.init.lock"
    assert lock.read_text() == "open"
    Store(tmp_path / "s.db").close()
    assert checks == [1] and lock.read_text().startswith("closed ")
    Store(tmp_path / "s.db").close()
    assert checks == [1]   # closed cleanly: no check
    os.utime(tmp_path / "s.db", ns=(1, 1))
    Store(tmp_path / "s.db").close()
    assert checks == [1, 1]
    assert _leftovers(marker) == []


def test_recover_copies_every_readable_row_and_refuses_an_open_store(tmp_path, capsys):
    path = tmp_path / "s.db"
    _store_with_runs(path)
    _damage(path)
    assert main(["store", "recover", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    kept = next(p for p in tmp_path.glob("s.db.damaged-*") if not p.name.endswith(("-wal", "-shm")))
    copied = int(out.split("recovered ")[1].split(" runs")[0])
    assert 250 <= copied < 300 and "1 damaged range" in out and str(kept) in out   # one page lost, the rest kept
    assert main(["store", "check", "--store", str(path)]) == 0
    assert f"ok ({copied} runs" in capsys.readouterr().out
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[2]); "
                               "from bisector.store.storage import Store; s = Store(sys.argv[1]); print('open', flush=True); "
                               "time.sleep(60)", str(path), str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        assert main(["store", "recover", "--store", str(path)]) == 2
        assert "is open in another bisector process" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
