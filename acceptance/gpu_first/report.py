"""check.md from a run's step files, and the bundle that brings it all back (standard library only).

check.md: every check with PASS / FAIL / SKIP / INCOMPLETE / FINDING, the steps' planned and actual
seconds, what the run was on, the steps' tables (the seed's), a WARN line for what the runner could
not do (a kernel that refuses the child subreaper), and every check with the condition it fails on
and the margin of its bound (checklist.py). The verdict line says FAIL when any check failed;
INCOMPLETE when a step ran out of time (or a command in it did: its INCOMPLETE checks), did not run
(the budget), or, on a GPU, a check was skipped; else PASS. A FINDING or a WARN never changes it.
Written after every step (:func:`bundle`, which also packs the work directory into
``$GF_RETURN/gpu_first.tgz`` beside a copy of check.md); runs on the host too:
``python3 acceptance/gpu_first/report.py`` with ``GF_OUT``."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checklist  # noqa: E402
from layout import BUNDLE_NAME, budget_s, dev, out_dir, planned_steps, read_json, return_dir  # noqa: E402


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict(steps: list, dev: str) -> str:
    checks = [c for s in steps if s for c in s["checks"]]
    if any(c["result"] == "FAIL" for c in checks):
        return "FAIL"
    if any(s is None or s.get("status") != "done" for s in steps) or any(c["result"] == "INCOMPLETE" for c in checks):
        return "INCOMPLETE"
    skipped = sum(c["result"] == "SKIP" for c in checks)
    if skipped and dev == "cuda":
        return "INCOMPLETE"
    return f"PASS (dry run on the CPU: {skipped} checks need CUDA)" if skipped else "PASS"


def _machine(facts: dict) -> str:
    device, versions = facts.get("probe_device") or {}, facts.get("versions") or {}
    total = device.get("total_bytes")
    parts = [f"{device.get('name')}" + (f", {total / (1 << 30):.1f} GiB" if isinstance(total, (int, float)) else "")]
    parts += [f"driver {device['driver']}"] if device.get("driver") else []
    parts += [f"CUDA {device['cuda']}"] if device.get("cuda") else []
    parts += [f"{k} {versions[k]}" for k in ("torch", "accelerate", "transformers", "python") if versions.get(k)]
    return " · ".join(parts)


def _status(data: dict) -> str:
    status = data.get("status")
    if status == "timeout":
        return "INCOMPLETE (ran out of time)"
    if status == "done" and any(c["result"] == "INCOMPLETE" for c in data["checks"]):
        return "done, INCOMPLETE (a command ran out of time)"
    return str(status)


def markdown(out: str) -> str:
    planned = planned_steps()
    steps = [read_json(os.path.join(out, f"{name}.json")) for name, _, _ in planned]
    run_dev = next((s["dev"] for s in steps if s), dev())
    took = sum(s.get("seconds", 0) for s in steps if s)
    warnings = sorted({w["detail"] for s in steps if s for w in s.get("warnings", [])})
    lines = [f"# acceptance/gpu_first: {verdict(steps, run_dev)}", ""]
    lines += [f"WARN: {w}: an orphan that left a step's session is found only while it is below the runner" for w in
              warnings] + ([""] if warnings else [])
    lines += [f"On: {_machine(((steps or [None])[0] or {}).get('facts', {}))}", "",
              f"DEV={run_dev}; steps took {took:.0f} s (planned on a GPU: {sum(p for _, p, _ in planned):g} s; "
              f"budget {budget_s():g} s)", "",
              "| step | planned s | took s | status | check | result | detail |", "|---|---|---|---|---|---|---|"]
    for (name, plan, _), data in zip(planned, steps):
        if data is None:
            lines.append(f"| {name} | {plan:g} | - | not run | - | FAIL | no {name}.json |")
            continue
        for i, c in enumerate(data["checks"] or [{"check": "-", "result": "FAIL", "detail": "no checks"}]):
            head = f"| {name} | {plan:g} | {data.get('seconds', '-')} | {_status(data)} |" if i == 0 else "| | | | |"
            result = c["result"] if c["result"] not in ("FAIL", "INCOMPLETE") else f"**{c['result']}**"
            lines.append(f"{head} {_cell(c['check'])} | {result} | {_cell(c['detail'])} |")
    for data in steps:
        for title, table in (data or {}).get("tables", {}).items():
            lines += ["", f"## {title}", "", "| " + " | ".join(table["header"]) + " |",
                      "|" + "---|" * len(table["header"])]
            lines += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in table["rows"]]
    lines += ["", "## Every check: where it fails, and the margin of its bound", "", checklist.table()]
    return "\n".join(lines)


def write(out: str) -> str:
    """check.md from the step files as they stand; its text."""
    text = markdown(out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "check.md.tmp"), "w") as fh:
        fh.write(text)
    os.replace(os.path.join(out, "check.md.tmp"), os.path.join(out, "check.md"))
    return text


def bundle() -> None:
    """check.md from what the steps wrote so far, and, with ``$GF_RETURN`` set, the whole work
    directory as one ``gpu_first.tgz`` there with a copy of check.md beside it (a machine that
    returns only a few files still returns everything, even after a kill)."""
    write(out_dir())
    target = return_dir()
    if not target:
        return
    import shutil
    import tarfile

    os.makedirs(target, exist_ok=True)
    archive = os.path.join(target, BUNDLE_NAME)
    tmp = f"{archive}.tmp{os.getpid()}"
    own = os.path.realpath(target)
    with tarfile.open(tmp, "w:gz") as tar:  # never the bundle itself, should the work directory hold it
        tar.add(out_dir(), arcname="gpu-first",
                filter=lambda info: None if BUNDLE_NAME in os.path.basename(info.name) else info)
    os.replace(tmp, archive)
    if os.path.realpath(out_dir()) != own:
        shutil.copyfile(os.path.join(out_dir(), "check.md"), os.path.join(target, "check.md.tmp"))
        os.replace(os.path.join(target, "check.md.tmp"), os.path.join(target, "check.md"))


def main(out: str) -> int:
    bundle()      # check.md, and the bundle with its copy where $GF_RETURN says
    with open(os.path.join(out, "check.md")) as fh:
        print(fh.read())
    return 0


if __name__ == "__main__":
    sys.exit(main(out_dir()))
