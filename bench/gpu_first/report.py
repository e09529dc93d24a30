"""check.md from a run's step files: every check with PASS / FAIL / SKIP, the steps' planned and
actual seconds, what the run was on, and the steps' tables (the seed's). The verdict line says FAIL
when any check failed; INCOMPLETE when a step did not run (the budget) or, on a GPU, a check was
skipped; else PASS. Runs on the host too: ``python3 bench/gpu_first/report.py`` with ``GF_OUT``."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict(steps: list, dev: str) -> str:
    checks = [c for s in steps if s for c in s["checks"]]
    if any(c["result"] == "FAIL" for c in checks):
        return "FAIL"
    if any(s is None or s.get("status") != "done" for s in steps):
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
             f"On: {_machine((steps[0] or {}).get('facts', {}))}", "",
             f"DEV={dev}; steps took {took:.0f} s (planned on a GPU: {sum(p for _, p, _ in planned):g} s; "
             f"budget {os.environ.get('GF_BUDGET', '520')} s)", "",
             "| step | planned s | took s | status | check | result | detail |", "|---|---|---|---|---|---|---|"]
    for (name, plan, _), data in zip(planned, steps):
        if data is None:
            lines.append(f"| {name} | {plan:g} | - | not run | - | FAIL | no {name}.json |")
            continue
        for i, c in enumerate(data["checks"] or [{"check": "-", "result": "FAIL", "detail": "no checks"}]):
            head = f"| {name} | {plan:g} | {data.get('seconds', '-')} | {data.get('status')} |" if i == 0 else "| | | | |"
            result = c["result"] if c["result"] != "FAIL" else "**FAIL**"
            lines.append(f"{head} {_cell(c['check'])} | {result} | {_cell(c['detail'])} |")
    for data in steps:
        for title, table in (data or {}).get("tables", {}).items():
            lines += ["", f"## {title}", "", "| " + " | ".join(table["header"]) + " |",
                      "|" + "---|" * len(table["header"])]
            lines += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def main(out: str) -> int:
    text = markdown(out)
    with open(os.path.join(out, "check.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    code = main(gf.out_dir())
    gf.bundle()
    sys.exit(code)
