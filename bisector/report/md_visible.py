"""The part of the markdown report a maintainer reads before any ``<details>`` (at most 25 lines): the
verdict with its links and the compare view, one small table of the headline metric (and the metrics
that moved most) at the range's endpoints and the boundary, the attribution and the revert in one line
each, each side's environment in one line, and one reproduce line."""
from __future__ import annotations

from typing import Callable, Optional

from bisector.commandline import reproduce_command
from bisector.core.result import BisectResult, Point
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.explain.generic import rel, unchanged
from bisector.report.common import also_changed_sentence, explainer, md_code, md_escape, move_phrase, result_metric
from bisector.report.culprit_lines import attributed, attribution_summary, confirmation_summary, through_companion
from bisector.report.md_inline import link, ref, table

VISIBLE_MAX = 25   # lines before the first <details>
MOVED_SHOWN = 3    # metrics beside the headline one in the table
_STATUS = {Outcome.NO_REGRESSION: "No regression in range", Outcome.PREDATES_RANGE: "The change predates the range",
           Outcome.UNDECIDED: "Undecided"}
_DEVICE = ("cpu", "gpu", "cuda", "driver")
_DEVICE_WORD = {"cuda": "CUDA ", "driver": "driver "}
ENV_LABELS = {"os": "OS", "python": "Python", "cuda": "CUDA", "gpu": "GPU", "cpu": "CPU"}


def shown(r: BisectResult) -> BisectResult:
    """The result whose boundary the report shows: the followed companion's when it found the step."""
    return through_companion(r) or r


def _compare(r: BisectResult) -> str:
    s = shown(r)
    if not s.compare_link or not s.last_good or not s.first_bad:
        return ""
    return " · compare " + link(md_code(f"{s.last_good.ref[:10]}...{s.first_bad.ref[:10]}"), s.compare_link)


def verdict_line(r: BisectResult) -> list[str]:
    """The one-line verdict: the culprit with its commit, PR and compare links, and the move."""
    f = through_companion(r)
    if f is not None and r.first_bad and r.attribution:
        return [f"**First bad: {md_escape(f.package)} {ref(f.first_bad)}, through the companion** (bisecting "
                f"{md_escape(r.package)} blamed {ref(r.first_bad)}, whose environment moved "
                f"{md_escape(r.attribution.minimal[0].describe())}) — {md_escape(move_phrase(f))}{_compare(r)}", ""]
    if r.status is Outcome.FOUND and r.first_bad:
        subject = f" '{md_escape(r.first_bad.subject)}'" if r.first_bad.subject else ""
        word = "First fixed" if r.find_fix else "First bad"
        return [f"**{word}: {md_escape(r.package)} {ref(r.first_bad)}**{subject} — {md_escape(move_phrase(r))}"
                f"{_compare(r)}", ""]
    return [f"**{_STATUS.get(r.status, md_escape(r.status))} for {md_escape(r.package)}:** {md_escape(r.reason)}", ""]


def _step_verdict(r: BisectResult, p: Point) -> Optional[Verdict]:
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


def points_table(r: BisectResult) -> list[str]:
    """The headline metric (and the ones that moved most) at each row of ``table_rows``."""
    s, rows = shown(r), table_rows(r)
    if not rows:
        return []
    metric = result_metric(s)
    names = ([metric] if metric else []) + moved_most(r, metric)
    label = explainer(s).label
    head = ["", md_escape(s.package), *(md_escape(label(n)) for n in names), "verdict"]
    body = []
    for name, p in rows:
        values = [p.value if n == metric else p.metrics.get(n) for n in names]
        verdict = _step_verdict(s, p)
        body.append([name, ref(p), *("-" if v is None else human_value(v, n) for v, n in zip(values, names)),
                     verdict.value.upper() if verdict else ""])
    return table(head, ["---", "---", *("---:" for _ in names), "---"], body)


def _sentence(label: str, text: Optional[str]) -> list[str]:
    return [f"**{label}:** {text[0].upper()}{text[1:]}.", ""] if text else []


def headline_lines(r: BisectResult) -> list[str]:
    """The attribution (unless the verdict already names the companion), the revert, the caution, the
    ambiguous set and the refinement: one line each."""
    out = []
    if through_companion(r) is None:
        out += _sentence("Attribution", attribution_summary(r, code=md_code))
    confirmed = confirmation_summary(shown(r), code=md_code)
    out += _sentence("Revert", confirmed)
    if not attributed(r):
        out += _sentence("Caution", also_changed_sentence(r, code=md_code))
    if r.ambiguous:
        out += ["The first bad is one of: " + ", ".join(md_code(a) for a in r.ambiguous), ""]
    if r.refine_command:
        out += [f"**Refine to commits:** {md_code(reproduce_command(r.refine_command) or r.refine_command)}", ""]
    return out


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
    items = [f"Python {code(env['python'])}"] if env.get("python") else []
    items += [f"torch {code(env['torch'])}"] if env.get("torch") and s.package != "torch" else []
    items.append(f"{esc(s.package)} {code(p.ref[:10])}")
    items += [f"{esc(k)} {code(v)}" for k, v in env.items() if k in differ]
    device = [f"{_DEVICE_WORD.get(k, '')}{env[k]}" for k in _DEVICE if env.get(k)]
    if device:
        items.append(("GPU " if env.get("gpu") else "CPU ") + code(", ".join(device)))
    if env.get("meter"):
        items.append(f"meter {code(env['meter'])}")
    return " · ".join(items)


def side_environments(r: BisectResult, code: Callable[[str], str] = md_code,
                      esc: Callable[[str], str] = md_escape) -> list[tuple[str, str]]:
    """(side, its environment in one line: python, torch, the package, the companions whose version
    differs between the sides, device, meter); ("", the merged facts) for results without sides."""
    s, sides = shown(r), _sides(r)
    if not sides:
        env = {k: v for k, v in r.environment.items() if v not in (None, "", {}) and k not in ("os", "env spec", "env base")}
        return [("", " · ".join(f"{esc(ENV_LABELS.get(k, k))} {code(v)}" for k, v in env.items()))] if env else []
    fixed = {"python", "torch", s.package, "meter", *_DEVICE}
    keys = {k for _, p in sides for k in p.env if k not in fixed}
    differ = {k for k in keys if len({p.env.get(k) for _, p in sides}) > 1}
    return [(name, _env_items(s, p, differ, code, esc)) for name, p in sides]


def environment_lines(r: BisectResult) -> list[str]:
    """One line per side (see ``side_environments``)."""
    sides = side_environments(r)
    if len(sides) == 1 and not sides[0][0]:
        return [f"**Environment:** {sides[0][1]}", ""]
    return ["**Environment:**", *(f"- {name}: {line}" for name, line in sides), ""] if sides else []


def reproduce_sentence(r: BisectResult, code: Callable[[str], str] = md_code) -> Optional[str]:
    """What the attached script showed in both environments, or how to get one (and the bisect itself)."""
    s, rp = shown(r), r.repro
    if rp is not None:
        def side(x, name):
            value = "no value" if x.value is None else human_value(x.value, rp.metric)
            why = f": {x.reason}" if x.reason else ""
            return f"{value} at {name} ({x.verdict.value.upper()}{why})"
        said = "reproduces it" if rp.verified else "does not reproduce it"
        return (f"the attached script {code(rp.path.rsplit('/', 1)[-1])} {said}: {side(rp.last_good, 'last good')}, "
                f"{side(rp.first_bad, 'first bad')}; it needs no bisector (each side's install line is in its header)")
    bisect = reproduce_command(r.command)
    out = (f"{code(f'bisector report {r.run_id} --repro repro.py')} writes a standalone script and checks it in "
           "both environments" if s.first_bad is not None and s.status is Outcome.FOUND else "")
    if bisect:
        out += ("; the bisect: " if out else "the bisect: ") + code(bisect)
    return out or None


def reproduce_line(r: BisectResult) -> list[str]:
    return _sentence("Reproduce", reproduce_sentence(r))


def visible(r: BisectResult) -> list[str]:
    """Everything before the first ``<details>``."""
    return (verdict_line(r) + points_table(r) + headline_lines(r) + environment_lines(r) + reproduce_line(r))
