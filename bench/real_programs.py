"""Real programs, unchanged: transformers' own ``run_clm_no_trainer.py`` and ``run_clm.py`` (v4.36.0) measured
and bisected after ``--``, under ``python`` and ``accelerate launch`` (1 and 2 CPU processes). Not run in CI.

    python bench/real_programs.py DIR [--cache-dir C] [--only NAME ...] [--no-bisect] [--bisect NAME ...]

DIR holds the programs, which this repository never carries (fetch them from the upstream repositories, unchanged):

* ``run_clm_no_trainer.py`` and ``run_clm.py``: huggingface/transformers ``examples/pytorch/language-modeling/`` at
  tag v4.36.0 (commit 14666775a296a76c88e1aa686a9547f393d322e2);
* ``accuracy/accuracy.py``: huggingface/evaluate ``metrics/accuracy/accuracy.py`` at tag v0.4.1 (``run_clm.py``
  calls ``evaluate.load("accuracy")``, which reads ``./accuracy/accuracy.py`` before the Hub: the run is offline).

Their sha256 are checked against those versions' (a mismatch is said, not refused). The inputs are made in DIR when
missing, by a scratch venv with transformers 4.36.0 (``uv``): ``text.txt`` (8 KB of generated sentences), ``tok/``
(a 320-token byte-level BPE trained with ``tokenizers``, saved as a ``PreTrainedTokenizerFast`` with pad/eos/bos,
``model_max_length`` 2048) and ``llama-tiny/`` (a ``LlamaConfig``: hidden 64, 2 layers, 2048 positions; the scripts
build the model from it with random weights).

For each setup (``nt``: ``python run_clm_no_trainer.py``; ``nt-acc1``/``nt-acc2``: the same under ``accelerate
launch`` with 1 process (``--cpu``) and 2 (``--multi_gpu``: torch's elastic agent over gloo on a machine without
GPUs; accelerate's ``--cpu --num_processes 2`` starts one process); ``tr``: ``python run_clm.py``, the Trainer) at
4.36.0 and 4.38.0: ``bisector probe --fresh --json`` (which builds the environment), then the same command plainly
in that environment; it prints both exit codes, the eval loss and perplexity each printed (``run_clm.py``'s
rounded lines and its ``all_results.json``), the optimizer steps, the step peak, the processes and the ranks.
Then ``bisector run --package transformers --good 4.36.0 --bad 4.38.2`` with no rule over ``nt-acc2`` and ``tr``
(``--bisect`` picks others), each with its own store: what it names, the values at the boundary, its probes and
time. Everything runs offline (``HF_HUB_OFFLINE`` etc., ``HF_HOME`` in DIR); one thing at a time.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = {   # sha256 of the upstream files at the tags named above
    "run_clm_no_trainer.py": "eb15fa0e89121c131f50de81222153a9e5a33d14ecebef2d06b77bf2810d8231",
    "run_clm.py": "e32cba72404b606df817133bd9e276fd831061500806f66da2d7510b0888e21f",
    "accuracy/accuracy.py": "13c80a4b9777ae25ced377fc1fb74be243653fe233ddc711388c34918f5f63e4",
}
WITH = ["--with", "datasets==2.17.0", "--with", "evaluate==0.4.1", "--with", "scikit-learn==1.4.0"]
DATA = ["--config_name", "llama-tiny", "--tokenizer_name", "tok", "--train_file", "text.txt",
        "--validation_split_percentage", "10", "--block_size", "64", "--per_device_train_batch_size", "2",
        "--per_device_eval_batch_size", "2", "--learning_rate", "1e-3", "--seed", "42"]
NO_TRAINER = ["run_clm_no_trainer.py", *DATA, "--max_train_steps", "4"]
TRAINER_OUT = Path(tempfile.gettempdir()) / "bisector-real-programs-out"   # outside DIR: not one of its inputs
TRAINER = ["run_clm.py", *DATA, "--max_steps", "4", "--do_train", "--do_eval", "--output_dir", str(TRAINER_OUT),
           "--overwrite_output_dir", "--report_to", "none", "--save_strategy", "no"]
LAUNCH = ["accelerate", "launch", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
SETUPS = {   # name: (command, processes that step, processes in all)
    "nt": (["python", *NO_TRAINER], 1, 1),
    "nt-acc1": ([*LAUNCH, "--cpu", "--num_processes", "1", *NO_TRAINER], 1, 2),
    "nt-acc2": ([*LAUNCH, "--multi_gpu", "--num_processes", "2", *NO_TRAINER], 2, 3),
    "tr": (["python", *TRAINER], 1, 1),
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_EVALUATE_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
PRINTED = re.compile(r"epoch \d+: perplexity: \S+ eval_loss: \S+|eval_loss\s+=\s+\S+|perplexity\s+=\s+\S+")

MAKE_INPUTS = r'''
import random
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast
WORDS = ("the model reads a line of text and predicts the next word from the words before it so each step "
         "of training moves its weights a little toward what the data says while memory holds the "
         "activations the gradients and the optimizer state for every layer of the network on this machine").split()
rng = random.Random(0)
lines = []
while sum(len(line) + 1 for line in lines) < 8000:
    lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + ".")
Path("text.txt").write_text("\n".join(lines) + "\n")
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
specials = ["<unk>", "<s>", "</s>", "<pad>"]
tok.train(["text.txt"], trainers.BpeTrainer(vocab_size=256 + len(specials) + 60, special_tokens=specials,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>", model_max_length=2048,
                               model_input_names=["input_ids", "attention_mask"])
fast.save_pretrained("tok")
LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
            pad_token_id=fast.pad_token_id).save_pretrained("llama-tiny")
'''


def mib(value) -> str:
    return f"{value / 2**20:.2f} MiB" if isinstance(value, (int, float)) else "-"


def check_programs(d: Path) -> bool:
    ok = True
    for name, digest in UPSTREAM.items():
        path = d / name
        if not path.is_file():
            print(f"missing: {path} (see this script's docstring for where it comes from)")
            return False
        same = hashlib.sha256(path.read_bytes()).hexdigest() == digest
        ok &= same
        print(f"{name}: {'the upstream file' if same else 'NOT the upstream v4.36.0 / v0.4.1 file (sha256 differs)'}")
    return ok


def make_inputs(d: Path) -> None:
    if all((d / n).exists() for n in ("text.txt", "tok", "llama-tiny")):
        return
    with tempfile.TemporaryDirectory(prefix="bisector-inputs-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                        "transformers==4.36.0"], check=True)
        made = subprocess.run([str(venv / "bin" / "python"), "-c", MAKE_INPUTS], cwd=d, capture_output=True,
                              text=True)
        if made.returncode:
            sys.exit(f"making the inputs failed: {made.stderr.strip()[-1500:]}")
    print(f"inputs made in {d}: text.txt, tok/, llama-tiny/")


def bisector(d: Path, cache: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, **OFFLINE, "HF_HOME": str(d / "hf-home"), "PYTHONPATH": str(ROOT),
           "BISECTOR_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bisector", *args], cwd=d, env=env, capture_output=True, text=True)
    return proc, time.perf_counter() - start


def plain(d: Path, env_dir: str, command: list[str]) -> tuple[int, str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OFFLINE, HF_HOME=str(d / "hf-home"), PATH=f"{env_dir}/bin:{env['PATH']}")
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=d, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def trainer_results() -> str:
    path = TRAINER_OUT / "all_results.json"
    if not path.is_file():
        return ""
    r = json.loads(path.read_text())
    return f" | all_results.json: eval_loss {r.get('eval_loss')} perplexity {r.get('perplexity')}"


def printed(text: str) -> str:
    return "; ".join(PRINTED.findall(text)) or "(no eval line)"


def walk(d: Path, cache: Path, name: str, version: str) -> bool:
    command, stepping, processes = SETUPS[name]
    shutil.rmtree(TRAINER_OUT, ignore_errors=True)
    proc, wall = bisector(d, cache, ["probe", "--fresh", "--json", "--with", f"transformers=={version}", *WITH,
                                     "--", *command])
    try:
        m = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(f"  {name} {version}: bisector probe exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
        return False
    metered_trainer = trainer_results()
    r, metrics = m.get("result") or {}, m.get("metrics") or {}
    out = m.get("details", {}).get("output") or {}
    metered_printed = printed("\n".join(line for lines in out.values() for line in lines))
    shutil.rmtree(TRAINER_OUT, ignore_errors=True)
    code, text, plain_wall = plain(d, m["env"]["path"], command)
    ranks = r.get("ranks") or []
    checks = {
        "same exit": code == m["exit_code"],
        "same eval line": printed(text) == metered_printed and trainer_results() == metered_trainer,
        "steps seen": metrics.get("optimizer_steps", 0) >= 4,
        "step_peak_bytes": "step_peak_bytes" in metrics,
        "ranks": len(ranks) == stepping and r.get("processes") == processes,
    }
    print(f"  {name} {version}: plain exit {code} ({plain_wall:.0f} s); metered exit {m['exit_code']} "
          f"({wall:.0f} s, {m['status']}{': ' + m['reason'] if m.get('reason') else ''})")
    print(f"    plain:   {printed(text)}{trainer_results()}")
    print(f"    metered: {metered_printed}{metered_trainer}")
    print(f"    steps {metrics.get('optimizer_steps')}, step_peak_bytes {mib(metrics.get('step_peak_bytes'))}, "
          f"processes {r.get('processes')}, ranks " + ", ".join(
              f"{k['rank']} (pid {k['pid']}, {k['steps']} steps, {mib(k['metrics'].get('step_peak_bytes'))})"
              for k in ranks))
    failed = [k for k, v in checks.items() if not v]
    print(f"    {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}")
    return not failed


def bisect(d: Path, cache: Path, name: str) -> bool:
    command = SETUPS[name][0]
    with tempfile.TemporaryDirectory(prefix="bisector-real-") as tmp:
        args = ["run", "--package", "transformers", "--good", "4.36.0", "--bad", "4.38.2", *WITH,
                "--store", str(Path(tmp) / "s.db"), "--json", "--", *command]
        proc, wall = bisector(d, cache, args)
    print(f"\n  bisector {' '.join(a for a in args if not a.startswith(tmp) and a != '--store')}")
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(f"  FAILED after {wall:.0f} s: exit {proc.returncode}: {proc.stderr.strip()[-1500:]}")
        return False
    first, last = out.get("first_bad") or {}, out.get("last_good") or {}
    good, bad = (last.get("metrics") or {}), (first.get("metrics") or {})
    print(f"  {out.get('headline')}")
    print(f"  last good {last.get('ref')}: {mib(good.get('step_peak_bytes'))}   first bad {first.get('ref')}: "
          f"{mib(bad.get('step_peak_bytes'))}   ({out.get('probes_run')} probes, {wall:.0f} s)")
    for key in sorted(k for k in bad if k.startswith("step_peak_bytes.rank")):
        print(f"  {key}: {mib(good.get(key))} -> {mib(bad[key])}")
    return first.get("ref") == "4.38.0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="the directory of the programs and their inputs (the working directory)")
    ap.add_argument("--cache-dir", type=Path, help="bisector's environment cache (default: a scratch one)")
    ap.add_argument("--only", nargs="+", choices=list(SETUPS), help="walk only these setups")
    ap.add_argument("--no-bisect", action="store_true", help="walk only, no bisect")
    ap.add_argument("--bisect", nargs="+", choices=list(SETUPS), default=["nt-acc2", "tr"], help="bisect these")
    args = ap.parse_args()
    d = args.dir.resolve()
    if not check_programs(d):
        print("warning: the programs are not the upstream files named in this script's docstring")
    make_inputs(d)
    scratch = None if args.cache_dir else tempfile.mkdtemp(prefix="bisector-cache-")
    cache = (args.cache_dir or Path(scratch)).resolve()
    ok = True
    try:
        for version in ("4.36.0", "4.38.0"):
            for name in args.only or list(SETUPS):
                ok &= walk(d, cache, name, version)
        for name in [] if args.no_bisect else args.bisect:
            ok &= bisect(d, cache, name)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\nall as expected" if ok else "\nsome checks FAILED (above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
