"""check.md from a run's step files: every check with PASS / FAIL / SKIP / INCOMPLETE, the steps'
planned and actual seconds, what the run was on, the steps' tables (the seed's) and every bound a
check holds with why it is what it is. The verdict line says FAIL when any check failed; INCOMPLETE
when a step ran out of time (its INCOMPLETE check), did not run (the budget), or, on a GPU, a check was
skipped; else PASS. Written after every step (gf.bundle); runs on the host too:
``python3 bench/gpu_first/report.py`` with ``GF_OUT``."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402


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
    parts = [f"{device.get('name')}" + (f", {device['total_bytes'] / (1 << 30):.1f} GiB" if device.get("total_bytes") else "")]
    parts += [f"driver {device['driver']}"] if device.get("driver") else []
    parts += [f"CUDA {device['cuda']}"] if device.get("cuda") else []
    parts += [f"{k} {versions[k]}" for k in ("torch", "accelerate", "transformers", "python") if versions.get(k)]
    return " · ".join(parts)


def markdown(out: str) -> str:
    planned = gf.planned_steps()
    steps = [gf.load(name) for name, _, _ in planned]
    dev = next((s["dev"] for s in steps if s), gf.dev())
    took = sum(s.get("seconds", 0) for s in steps if s)
    lines = [f"# bench/gpu_first: {verdict(steps, dev)}", "",
             f"On: {_machine(((steps or [None])[0] or {}).get('facts', {}))}", "",
             f"DEV={dev}; steps took {took:.0f} s (planned on a GPU: {sum(p for _, p, _ in planned):g} s; "
             f"budget {os.environ.get('GF_BUDGET', '520')} s)", "",
             "| step | planned s | took s | status | check | result | detail |", "|---|---|---|---|---|---|---|"]
    for (name, plan, _), data in zip(planned, steps):
        if data is None:
            lines.append(f"| {name} | {plan:g} | - | not run | - | FAIL | no {name}.json |")
            continue
        for i, c in enumerate(data["checks"] or [{"check": "-", "result": "FAIL", "detail": "no checks"}]):
            status = {"timeout": "INCOMPLETE (ran out of time)"}.get(data.get("status"), data.get("status"))
            head = f"| {name} | {plan:g} | {data.get('seconds', '-')} | {status} |" if i == 0 else "| | | | |"
            result = c["result"] if c["result"] not in ("FAIL", "INCOMPLETE") else f"**{c['result']}**"
            lines.append(f"{head} {_cell(c['check'])} | {result} | {_cell(c['detail'])} |")
    for data in steps:
        for title, table in (data or {}).get("tables", {}).items():
            lines += ["", f"## {title}", "", "| " + " | ".join(table["header"]) + " |",
                      "|" + "---|" * len(table["header"])]
            lines += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in table["rows"]]
    bounds = [list(b) for b in verdicts.BOUNDS]
    bounds += [b for data in steps for b in ((data or {}).get("facts") or {}).get("bounds", [])]
    lines += ["", "## Bounds: where each check fails, and why there", "", "| check | fails when | why |",
              "|---|---|---|"] + [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in bounds]
    return "\n".join(lines) + "\n"


def write(out: str) -> str:
    """check.md from the step files as they stand; its text."""
    text = markdown(out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "check.md.tmp"), "w") as fh:
        fh.write(text)
    os.replace(os.path.join(out, "check.md.tmp"), os.path.join(out, "check.md"))
    return text


def main(out: str) -> int:
    gf.bundle()      # check.md, and the bundle with its copy where $GF_RETURN says
    with open(os.path.join(out, "check.md")) as fh:
        print(fh.read())
    return 0


if __name__ == "__main__":
    sys.exit(main(gf.out_dir()))
