"""What every format shows of a bisect's answer the same way: the result whose boundary is shown (the
followed companion's when it found the step), the rows of the table (the range's endpoints and the
boundary, each in its role), the metrics that moved most, each side's environment in one line, and
the reproduce sentence. Markdown (md_visible) and text (text) render them."""
from __future__ import annotations

from typing import Callable, Optional

from bisector.job.commandline import shown_command
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult
from bisector.core.points import Point
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.explain.generic import rel, unchanged
from bisector.report.common import explainer, md_code, md_escape
from bisector.report.culprit_lines import through_companion
from bisector.report.env_labels import LABELS, WHERE, flat

MOVED_SHOWN = 3    # metrics beside the headline one in the table
DEVICE = ("cpu", "gpu", "cuda", "driver")


def shown(r: BisectResult) -> BisectResult:
    """The result whose boundary the report shows: the followed companion's when it found the step."""
    return through_companion(r) or r


def step_verdict(r: BisectResult, p: Point) -> Optional[Verdict]:
    """The verdict of the last step that judged ``p`` (a contrast setting's steps are another setting's)."""
    labels = {p.ref, p.ref[:10], (p.sha or "")[:10]}
    step = next((s for s in reversed(r.steps) if s.candidate in labels and s.phase != "contrast"), None)
    return step.verdict if step else None


def table_rows(r: BisectResult) -> list[tuple[str, Point]]:
    """(label, point) from the good endpoint to the bad one; a point in two roles is one row."""
    s = shown(r)
    first = {Outcome.UNDECIDED: "first measured bad"}.get(s.status, "first bad")
    roles = [("good endpoint", s.good_end), ("last good", s.last_good), (first, s.first_bad), ("bad endpoint", s.bad_end)]
    if s.status is Outcome.PREDATES_RANGE and s.good_end is not None:
        roles = [role for role in roles if role[0] != first]          # the good endpoint measured bad
    if s.status is Outcome.NO_REGRESSION and s.bad_end is not None:
        roles = [role for role in roles if role[0] != "last good"]    # the bad endpoint measured good
    rows: list[tuple[str, Point]] = []
    for name, p in roles:
        if p is None:
            continue
        if rows and rows[-1][1].ref == p.ref and rows[-1][1].kind == p.kind:
            rows[-1] = (f"{rows[-1][0]}, {name}", rows[-1][1])
        else:
            rows.append((name, p))
    return rows


def moved_most(r: BisectResult, metric: Optional[str]) -> list[str]:
    """Besides the headline metric, the metrics that moved most between the boundary (else the ends)."""
    s = shown(r)
    a, b = (s.last_good, s.first_bad) if s.last_good and s.first_bad else (s.good_end, s.bad_end)
    if a is None or b is None:
        return []
    names = explainer(s).headline({**a.metrics, **b.metrics}, metric)
    pool = names if len(names) > 1 else sorted({*a.metrics, *b.metrics})
    moved = [n for n in pool if n != metric and n in a.metrics and n in b.metrics
             and not unchanged(n, a.metrics[n], b.metrics[n])]
    return sorted(moved, key=lambda n: (-rel(a.metrics[n], b.metrics[n]), pool.index(n)))[:MOVED_SHOWN]


def _sides(r: BisectResult) -> list[tuple[str, Point]]:
    s = shown(r)
    if s.last_good is not None and s.first_bad is not None:
        pairs = [("last good", s.last_good), ("first bad", s.first_bad)]
    else:
        pairs = [(name, p) for name, p in table_rows(r) if p.env]
    return [(name, p) for name, p in pairs if p.env]


def _env_items(s: BisectResult, p: Point, differ: set[str], code: Callable[[str], str],
               esc: Callable[[str], str]) -> str:
    env = p.env
    items = [f"Python {code(env.python)}"] if env.python else []
    items += [f"torch {code(env.torch)}"] if env.torch and s.package != "torch" else []
    items.append(f"{esc(s.package)} {code(p.ref[:10] if p.kind is CandidateKind.COMMIT else p.ref)}")
    items += [f"{esc(k)} {code(v)}" for k, v in flat(env).items() if k in differ]
    device = [f"{word}{value}" for word, value in (("", env.cpu), ("", env.gpu), ("CUDA ", env.cuda),
                                                   ("driver ", env.driver)) if value]
    if device:
        items.append(("GPU " if env.gpu else "CPU ") + code(", ".join(device)))
    if env.meter:
        items.append(f"meter {code(env.meter)}")
    return " · ".join(items)


def side_environments(r: BisectResult, code: Callable[[str], str] = md_code,
                      esc: Callable[[str], str] = md_escape) -> list[tuple[str, str]]:
    """(side, its environment in one line: python, torch, the package, the companions whose version
    differs between the sides, device, meter); ("", the merged facts) for results without sides."""
    s, sides = shown(r), _sides(r)
    if not sides:
        env = {k: v for k, v in flat(r.environment).items() if k not in WHERE}
        return [("", " · ".join(f"{esc(LABELS.get(k, k))} {code(v)}" for k, v in env.items()))] if env else []
    fixed = {"python", "torch", s.package, "meter", *DEVICE}
    keys = {k for _, p in sides for k in flat(p.env) if k not in fixed}
    differ = {k for k in keys if len({flat(p.env).get(k) for _, p in sides}) > 1}
    return [(name, _env_items(s, p, differ, code, esc)) for name, p in sides]


def repro_said(r: BisectResult, code: Callable[[str], str] = md_code) -> Optional[str]:
    """What the attached script (``bisector report --repro``) printed in both environments, if it ran."""
    rp = r.repro
    if rp is None:
        return None

    def side(x, name):
        value = "no value" if x.value is None else human_value(x.value, rp.metric)
        why = f": {x.reason}" if x.reason else ""
        return f"{value} at {name} ({x.verdict.value.upper()}{why})"

    said = "reproduces it" if rp.verified else "does not reproduce it"
    needs = (f", and what it could not carry of the command's files, put beside it by hand as its header says: "
             f"{', '.join(map(code, rp.left_out))}") if rp.left_out else ""
    return (f"the attached script {code(rp.path.rsplit('/', 1)[-1])} {said}: {side(rp.last_good, 'last good')}, "
            f"{side(rp.first_bad, 'first bad')}; it needs no bisector (each side's install lines are in its header)"
            f"{needs}")


def repro_commands(r: BisectResult) -> tuple[Optional[str], Optional[str]]:
    """(the command that writes the repro script, when there is a step to reproduce; the bisect's own)."""
    s = shown(r)
    script = (f"bisector report {r.run_id} --repro repro.py"
              if s.first_bad is not None and s.status is Outcome.FOUND and r.repro is None else None)
    return script, shown_command(r.command)


def reproduce_sentence(r: BisectResult, code: Callable[[str], str] = md_code) -> Optional[str]:
    """The reproduce line: what the attached script showed, or how to get one (and the bisect itself)."""
    said = repro_said(r, code)
    if said:
        return said
    script, bisect = repro_commands(r)
    out = f"{code(script)} writes a standalone script and checks it in two fresh environments made by its install lines" if script else ""
    if bisect:   # (markdown: the command's own encoder, which keeps every word as it is)
        out += ("; the bisect: " if out else "the bisect: ") + (shown_command(r.command, "markdown")
                                                                 if code is md_code else code(bisect))
    return out or None
