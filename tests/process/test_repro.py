"""``bisector report --repro FILE``: the standalone script (no bisector in it, both sides' install lines,
the probe's own code run with the run's arguments) and its verification in the last good and first bad
environments, recorded in the run. The fast tests check the scripts' text and run the generic ones;
the slow ones run the ga_memory script against the probe itself and verify scripts in real envs."""
from __future__ import annotations

import ast
import base64
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.repro.compose import repro_script
from bisector.cli.main import main
from bisector.job.config import JobConfig
from bisector.core.result import BisectResult
from bisector.core.points import Point, PointEnv
from bisector.core.search import Outcome
from bisector.errors import UsageError
from bisector.job.probe_code import builtin_files
from bisector.store.storage import RunRow, Store, now

ROOT = Path(__file__).resolve().parents[2]
PROBES = Path(__file__).resolve().parent.parent / "probes"
REPO = "https://github.com/huggingface/accelerate"
GOOD_SHA, BAD_SHA = "64ae9ea3fe80aa7828ab3f5255f8832cdba7b5c5", "145a98fc12854677688fb90db4b7777c75f73b3e"
GA_CONFIG = {"loop": "accelerate", "arch": "gpt_neox", "sizes": [64, 128], "seq_lens": [8], "layers": 2, "heads": 4,
             "vocab": 512, "max_positions": 64, "batch": 1, "precisions": ["fp32", "bf16"], "ga": [1, 2],
             "optimizer": "sgd", "gradient_checkpointing": True, "use_reentrant": None, "use_cache": False,
             "attn": "eager", "shape": {}, "shape_hidden": None, "model_factory": None, "zero_grad_target": "optimizer",
             "zero_grad_policy": "default", "max_grad_norm": 0.0, "lr_scheduler": "none", "precision_via": "arg",
             "warmup_steps": 1, "seed": 0, "threads": 1, "device": "cpu", "profile": "default"}
ENV = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "4.38.2", "cpu": "AMD EPYC, 1 threads",
       "meter": "cpu-dispatch"}
PINS = ["numpy==1.26.4", "torch==2.13.0+cpu", "transformers==4.38.2"]


def _commit(sha: str, value: float) -> Point:
    return Point(ref=sha[:12], kind="commit", sha=sha, date=dt.datetime(2024, 3, 7, tzinfo=dt.timezone.utc),
                 value=value, env={**ENV, "accelerate": "0.28.0.dev0"}, pins=[*PINS, "accelerate==0.28.0.dev0"],
                 link=f"{REPO}/commit/{sha}")


def ga_result(config: dict | None = None, metric: str = "ga_excess_bytes_per_param") -> BisectResult:
    return BisectResult(run_id="0fbe6fae7b89", package="accelerate", mode="commit", status="found",
                        reason="found", criterion=f"{metric} > 0.5", metric=metric, threshold=0.5,
                        last_good=_commit(GOOD_SHA, 0.0), first_bad=_commit(BAD_SHA, 1.244), repo_url=REPO,
                        probe={"probe": "ga_memory", "name": "ga_memory", "config": config or GA_CONFIG},
                        command="bisector run --good 0.20 --bad 1.0 --probe-arg=--loop=accelerate --repo /src/acc")


def ga_job(**probe) -> JobConfig:
    return JobConfig.model_validate({"job": {"package": "accelerate", "good": "0.20", "bad": "1.0"},
                                     "probe": {"name": "ga_memory", "args": ["--loop=accelerate"], **probe},
                                     "criterion": {"metric": "ga_excess_bytes_per_param", "threshold": 0.5}})


def _files_of(text: str) -> dict[str, bytes]:
    """The FILES a script holds, as the files it writes."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "FILES")
    files = eval(compile(ast.Expression(node.value), "FILES", "eval"), {"base64": base64})   # noqa: S307
    return {rel: source.encode() if isinstance(source, str) else source for rel, source in files.items()}


def test_the_ga_memory_script_is_the_probe_itself_with_the_runs_arguments_and_both_install_lines():
    text = repro_script(ga_result(), ga_job(), "repro.py").text
    compile(text, "repro.py", "exec")
    assert "import bisector" not in text and "from bisector" not in text and "# >>>" not in text
    probe = {f.relative_to(ROOT / "probes").as_posix(): f.read_bytes()
             for f in builtin_files(ROOT / "probes" / "ga_memory" / "__main__.py")}
    assert _files_of(text) == probe   # the probe's own code, byte for byte: no copy of its loop or meter
    assert "_meters/cpu.py" in probe and "ga_memory/_training/trainer_loop.py" in probe
    assert "ARGS = ['--loop=accelerate']" in text and "DEVICE = 'cpu'" in text
    assert "METRIC, THRESHOLD, DIRECTION = 'ga_excess_bytes_per_param', 0.5, 'increase'" in text
    assert "'loop': 'accelerate'" in text and "'sizes': [64, 128]" in text   # the settings a run must have
    head = text.split('"""', 1)[0]
    for sha, venv in ((GOOD_SHA, "good"), (BAD_SHA, "bad")):
        assert f"git+{REPO}.git@{sha}" in head and f"{venv}/bin/python repro.py" in head
    assert " torch==2.13.0\n" in head and f" --no-deps transformers==4.38.2 git+{REPO}.git@" in head
    assert "numpy==1.26.4" in head and "accelerate==0.28.0.dev0" not in head   # the pins, but not the dev version
    assert "0.000 B/param at last good (GOOD), 1.244 B/param at first bad (BAD)" in " ".join(
        w for w in head.split() if w != "#")
    cuda = repro_script(ga_result({**GA_CONFIG, "device": "cuda", "loop": "trainer"}), ga_job(), "r.py").text
    assert "DEVICE = 'cuda'" in cuda and "'loop': 'trainer'" in cuda and _files_of(cuda) == probe
    compile(cuda, "r.py", "exec")
    phase = repro_script(ga_result(metric="phase_peak_bytes.bf16.ga2.h64.forward"), ga_job(), "r.py").text
    assert "METRIC, THRESHOLD, DIRECTION = 'phase_peak_bytes.bf16.ga2.h64.forward'" in phase   # any metric it writes


def test_a_ga_memory_script_run_in_another_setting_than_the_bisects_is_not_judged(tmp_path):
    """The script judges only what the probe measured in the bisect's settings (its results' probe.config):
    here the bisect's say sizes 64 and 96, the arguments give the probe's own (64 to 256)."""
    config = {**GA_CONFIG, "sizes": [64, 96], "precisions": ["fp32"], "ga": [1]}
    script = tmp_path / "repro.py"
    script.write_text(repro_script(ga_result(config, metric="peak_bytes.fp32.ga1.h64"),
                                   ga_job(args=["--loop=accelerate", "--sizes=64", "--precisions=fp32", "--ga=1"]),
                                   script.name).text)
    env = {k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 125 and ran.stdout == "", ran.stderr[-2000:]
    assert "measured in another setting than the bisect's, not judged: sizes [64] (the bisect: [64, 96])" in ran.stderr


def test_what_cannot_be_reproduced_is_one_clear_error():
    predates = ga_result().model_copy(update={"status": Outcome.PREDATES_RANGE, "last_good": None})
    with pytest.raises(UsageError, match="has no last good and first bad .predates-range.: nothing to reproduce"):
        repro_script(predates, ga_job(), "r.py")
    old = ga_result()
    old.first_bad.env = PointEnv()
    with pytest.raises(UsageError, match="stored before reports kept each side's environment"):
        repro_script(old, ga_job(), "r.py")


def _tiny_result(kind: str = "release") -> BisectResult:
    env = {"python": "3.11.7", "torch": "2.13.0+cpu", "tinypkg": "x"}
    sides = [Point(ref=v, kind=kind, value=x, env={**env, "tinypkg": v}, pins=[f"tinypkg=={v}"])
             for v, x in (("1.3.0", 100.0), ("1.4.0", 400.0))]
    return BisectResult(run_id="r1", package="tinypkg", mode=kind, status="found", reason="found",
                        criterion="m > 200", metric="m", threshold=200.0, last_good=sides[0], first_bad=sides[1])


def test_a_script_probe_is_embedded_and_runs_with_the_runs_arguments(tmp_path):
    probe = tmp_path / "my_probe.py"
    probe.write_text("import json, os, sys\nvalue = float(sys.argv[sys.argv.index('--m') + 1])\n"
                     "json.dump({'metrics': {'m': value}}, open(os.environ['BISECTOR_RESULT'], 'w'))\n")
    config = JobConfig.model_validate({"job": {"package": "tinypkg", "good": "1.0", "bad": "1.6"},
                                       "probe": {"path": str(probe), "args": ["--m", "400"]},
                                       "criterion": {"metric": "m", "threshold": 200}})
    script = tmp_path / "repro.py"
    script.write_text(repro_script(_tiny_result(), config, script.name).text)
    probe.unlink()   # self-contained: the probe's source travels in the script
    env = {k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert (ran.returncode, ran.stdout) == (1, "m = 400: BAD (BAD when > 200)\n"), ran.stderr
    out = tmp_path / "result.json"
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**env, "BISECTOR_RESULT": str(out)})
    assert ran.returncode == 0 and json.loads(out.read_text()) == {"metrics": {"m": 400.0}}   # bisector judges it
    head = script.read_text().split('"""', 1)[0]
    lines = [line[4:] for line in head.splitlines() if line.startswith("# $ ")]
    index = lines[1].split()[3]
    assert lines == ["python3 -m venv good", f"good/bin/pip install --index-url {index} torch==2.13.0",
                     f"good/bin/pip install --index-url {index} --no-deps tinypkg==1.3.0", "python3 -m venv bad",
                     f"bad/bin/pip install --index-url {index} torch==2.13.0",
                     f"bad/bin/pip install --index-url {index} --no-deps tinypkg==1.4.0"]
    assert "#   good/bin/python repro.py\n#   bad/bin/python repro.py\n" in head


def test_a_builtin_probe_travels_with_its_helper_modules(tmp_path):
    config = JobConfig.model_validate({"job": {"package": "tinypkg", "good": "1.0", "bad": "1.6"},
                                       "probe": {"name": "import_cost", "args": ["--module", "json"]},
                                       "criterion": {"metric": "import_modules", "threshold": 100000}})
    result = _tiny_result().model_copy(update={"metric": "import_modules", "threshold": 100000.0})
    script = tmp_path / "repro.py"
    script.write_text(repro_script(result, config, script.name).text)
    env = {k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"}
    ran = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, env=env, timeout=60,
                         cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout.startswith("import_modules = ") and "GOOD" in ran.stdout, ran.stderr


def test_an_exit_code_probe_is_its_command_word_for_word_and_its_exit_code(tmp_path):
    """The command, as the bisect ran it (words, no shell, in a scratch directory, this environment's python first
    on PATH), and its exit code is the script's."""
    config = JobConfig.model_validate({"job": {"package": "tinypkg", "good": "1.0", "bad": "1.6"},
                                       "probe": {"cmd": "python -c 'import os, sys; sys.exit(len(os.listdir()) + 3)'"}})
    script = tmp_path / "r.py"
    script.write_text(repro_script(_tiny_result().model_copy(update={"metric": None, "threshold": None}), config,
                                   script.name).text)
    text = script.read_text()
    assert "COMMAND = ['python', '-c', 'import os, sys; sys.exit(len(os.listdir()) + 3)']" in text
    assert "#   good/bin/python r.py\n#   bad/bin/python r.py\n" in text and "0 GOOD, 125 SKIP" in text
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (ran.returncode, ran.stderr) == (3, "exit 3: BAD\n")   # (an empty scratch directory: 0 files + 3)


def test_bad_input_to_repro_is_one_line_and_writes_nothing(tmp_path, capsys):
    store = Store(tmp_path / "s.db")
    r = ga_result().model_copy(update={"status": Outcome.PREDATES_RANGE, "last_good": None})
    store.put_run(RunRow(id=r.run_id, created=now(), updated=now(), kind="bisect", command=["bisector", "run"],
                         config=ga_job().model_dump(mode="json"), status=r.status, result=r.model_dump(mode="json")))
    out = tmp_path / "repro.py"
    assert main(["report", "--repro", str(out), "--store", str(tmp_path / "s.db")]) == 2
    assert "nothing to reproduce" in capsys.readouterr().err and not out.exists()
    assert main(["report", "--repro", str(tmp_path / "no" / "r.py"), "--store", str(tmp_path / "s.db")]) == 2
    assert "no directory" in capsys.readouterr().err and not (tmp_path / "no").exists()


# -- slow: the real thing ----------------------------------------------------------------------------------
def _probe_result(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "probe.json"
    env = {**{k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"}, "BISECTOR_DEVICE": "cpu"}
    subprocess.run([sys.executable, str(ROOT / "probes" / "ga_memory" / "__main__.py"), *args, "--result", str(out)],
                   check=True, capture_output=True, env=env, timeout=900)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from tests.support.pkgindex import LocalIndex, build_wheel

    root = tmp_path_factory.mktemp("repro-index")
    idx = LocalIndex(root / "idx")
    t0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
    for i, v in enumerate(["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"]):
        src = f"BUFFER_KIB = {400 if v >= '1.4.0' else 100}\n\ndef step():\n    return len(bytearray(BUFFER_KIB * 1024))\n"
        idx.add(build_wheel(root / "w", "tinypkg", v, module_source=src), t0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"})


