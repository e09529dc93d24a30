"""The examples each command's ``--help`` ends with: real commands, in the order a user meets them."""
from __future__ import annotations

EXAMPLES = {
    "bisector": [
        ("the default job: the seed report's range in the reporter's Trainer loop", "bisector run"),
        ("measure one version and say where its bytes live", "bisector probe --with accelerate==0.22.0 --explain"),
        ("bisect a range, down to the commit, from a local clone",
         "bisector run --good 0.27 --bad 0.28 --probe-arg=--loop=accelerate --repo ~/src/accelerate"),
        ("a nightly version matrix", "bisector matrix --config bisect.toml --out reports/"),
    ],
    "run": [
        ("the default job (built in; ./bisect.toml and flags override it)", "bisector run"),
        ("the maintainers' loop over the release that changed zero_grad",
         "bisector run --good 0.27 --bad 0.28 --probe-arg=--loop=accelerate"),
        ("your own training script, unchanged (its memory per optimizer step; no rule: a 10% rise is BAD)",
         "bisector run --package transformers --good 4.36.0 --bad 4.38.2 -- python train.py"),
        ("where did my script start to crash?",
         "bisector run --package transformers --good 4.36.0 --bad 4.38.2 --crash-is-bad -- python train.py"),
        ("your own probe script and metric, releases only",
         "bisector run --package transformers --good 4.38 --bad 4.40 --mode releases --probe my_probe.py "
         "--metric step_seconds --max-increase 20%"),
        ("torch itself: every torch release its own base (CUDA wheels are GBs each; the size is said first)",
         "bisector run --package torch --good 2.11 --bad 2.13 --probe-arg=--loop=accelerate --with accelerate==1.10.0"),
        ("without a torch next to bisector: choose one for every candidate", "bisector run --torch 2.13.0"),
        ("an exit-code repro, commits of a local clone",
         "bisector run --package accelerate --mode commits --repo ~/src/accelerate --good v0.27.2 --bad v0.28.0 "
         "--probe-cmd 'python repro.py'"),
    ],
    "probe": [
        ("one version, in the default job's setting", "bisector probe --with accelerate==0.22.0"),
        ("where the GA bytes live, in accelerate's own loop",
         "bisector probe --with accelerate==0.22.0 --probe-arg=--loop=accelerate --explain"),
        ("your own script at one version, with its own dependencies beside it",
         "bisector probe --with transformers==4.38.0 --with datasets==2.16.1 -- python train.py"),
        ("pin a companion, measure again, everything as JSON",
         "bisector probe --with accelerate==0.28.0 --with transformers==4.38.2 --fresh --json"),
    ],
    "matrix": [
        ("the [matrix] grid of ./bisect.toml against its previous run", "bisector matrix"),
        ("nightly, bisecting what regressed", "bisector matrix --config nightly.toml --bisect-on-regression --out reports/"),
    ],
    "diff": [
        ("the seed thread: the reporter's Trainer loop against the maintainers' loop, knob by knob",
         "bisector diff --with accelerate==0.22.0 --a-arg=--loop=trainer --b-arg=--loop=accelerate"),
        ("two pip freeze files at one transformers version, the package that matters bisected",
         "bisector diff --package transformers --a-lock mine.txt --b-lock yours.txt --follow --json"),
    ],
    "log": [("the latest run's log", "bisector log"), ("one run's", "bisector log 1d17df1b72b4")],
    "report": [("the latest run as markdown for an issue", "bisector report"),
               ("one run as JSON", "bisector report 1d17df1b72b4 --format json"),
               ("a repro script to attach, checked in fresh venvs made by its header", "bisector report --repro repro.py")],
    "runs": [("every stored run", "bisector runs"), ("in another store", "bisector runs --store ci.sqlite")],
    "store": [("is the store sound (PRAGMA integrity_check)", "bisector store check"),
              ("a new store from every readable row of a damaged one", "bisector store recover --store ci.sqlite")],
    "envs": [("the cached environments", "bisector envs list"),
             ("keep the 10 newest and at most 20 GB", "bisector envs gc --keep-last 10 --max-size 20G"),
             ("torch bases: none unused for two weeks, at most 30 GB of them",
              "bisector envs gc --older-than 14d --bases-max-size 30G")],
    "envs list": [("the cached environments", "bisector envs list"),
                  ("another cache", "bisector envs list --cache-dir /scratch/bisector")],
    "envs gc": [("keep the 10 newest and at most 20 GB", "bisector envs gc --keep-last 10 --max-size 20G"),
                ("torch bases: none unused for two weeks, at most 30 GB of them",
                 "bisector envs gc --older-than 14d --bases-max-size 30G")],
}


def epilog(command: str) -> str:
    """'examples:' and the command's examples, for ``--help``."""
    lines = ["examples:"]
    for what, cmd in EXAMPLES.get(command, []):
        lines += [f"  # {what}", f"  {cmd}"]
    return "\n".join(lines)
