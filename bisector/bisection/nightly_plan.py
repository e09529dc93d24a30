"""torch's second level: the nightlies, as candidate lists. After the releases, the nightlies between the
last good and first bad release (bisector.sources.nightly says which), of the build the releases' bases
ran (their local label: a base of 2.13.0+cpu takes +cpu nightlies), between those two releases as the
list's ends (their measurements are reused); or, with ``--mode nightlies``, the nightlies from the good day
to the bad one. Nightlies measured before and since deleted from the index stay in the list (their stored
measurements are reused)."""
from __future__ import annotations

import datetime as dt
from typing import Optional

from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.core.candidate import CandidateKind
from bisector.errors import UsageError, cut
from bisector.job.config import JobSection
from bisector.redact import redact_url
from bisector.sources.nightly import (Nightly, between_days, between_releases, builds, candidate, label_of,
                                      list_nightlies, nightly_day, parse_day)

NO_NIGHTLY_INDEX = ("torch stops at releases here: --nightly-index URL (or nightly_index in bisect.toml's [job]) "
                    "goes on to the nightly wheels between the two releases, then to the commits between two nightlies")
NIGHTLIES_NEED = "--mode nightlies needs --nightly-index URL (or nightly_index in bisect.toml's [job])"


def stored_nightlies(refs: list[str]) -> list[Nightly]:
    """The nightlies among the versions a store holds measurements of (a day the index may have deleted)."""
    out = []
    for ref in dict.fromkeys(refs):
        day = nightly_day(ref)
        if day is not None:
            out.append(Nightly(version=ref, day=day, label=label_of(ref)))
    return out


def _merged(found: list[Nightly], stored: list[Nightly]) -> list[Nightly]:
    known = {n.parsed for n in found}
    return sorted([*found, *(n for n in stored if n.parsed not in known)], key=lambda n: (n.day, n.parsed))


def build_label(phase: PhaseResult, index: int) -> Optional[str]:
    """The local label of the torch candidate ``index``'s measurements ran (``cpu`` of 2.13.0+cpu)."""
    for m in phase.judgements[index].measurements if index in phase.judgements else []:
        if m.env and m.env.torch:
            return label_of(m.env.torch)
    return label_of(phase.candidates[index].ref)


def after_releases(job: JobSection, plan: Plan, phase: PhaseResult, stored: list[str]) -> tuple[Optional[Plan], str]:
    """The nightly plan between the release phase's last good and first bad (None when the index holds
    none between them), and the line that says so."""
    s = phase.search
    assert s.last_good is not None and s.first_bad is not None and job.nightly_index
    older, newer = sorted((s.last_good, s.first_bad))
    lo, hi = plan.candidates[older], plan.candidates[newer]
    label = build_label(phase, newer) or build_label(phase, older)
    nightlies = _merged(list_nightlies(job.nightly_index, job.package), stored_nightlies(stored))
    days = between_releases(nightlies, lo.ref, hi.ref, hi.date, label)
    where = f"{'+' + label if label else 'unlabelled'} nightlies between {lo.ref} and {hi.ref} on " \
            f"{redact_url(job.nightly_index)}"
    if not days:
        return None, f"torch stops at releases: no {where} (patch releases come from a release branch)"
    span = f"{days[0].day} .. {days[-1].day}"
    return (Plan([lo, *(candidate(job.package, n) for n in days), hi]),
            f"going on to the nightlies: {len(days)} {where} ({span}), the two releases at their ends")


def _label(first: Optional[str], last: Optional[str], found: list[Nightly], job: JobSection) -> Optional[str]:
    if first and last and first != last:
        raise UsageError(f"--good {cut(job.good)} and --bad {cut(job.bad)} name two builds (+{first}, +{last}): "
                         "a bisect compares one build")
    named = first or last
    if named is not None:
        return named
    labels = builds(found)
    if len(labels) > 1:
        shown = ", ".join(f"+{x}" if x else "unlabelled" for x in labels)
        raise UsageError(f"the nightly index holds several builds in that range ({shown}): name one by a nightly's "
                         "version, e.g. --good 2.14.0.dev20261001+cpu")
    return (labels[0] or None) if labels else None


def _endpoint(days: list[Nightly], day: dt.date, flag: str, text: str) -> None:
    if not any(n.day == day for n in days):
        near = sorted(days, key=lambda n: abs((n.day - day).days))[:2]
        hint = ", ".join(str(n.day) for n in sorted(near, key=lambda n: n.day)) or "none in that range"
        raise UsageError(f"{flag} {cut(text)}: no nightly of that day on the nightly index (nearest: {hint})")


def nightly_plan(job: JobSection, stored: list[str]) -> Plan:
    """``--mode nightlies``: the nightlies from the good day to the bad one (``--find-fix``: bad first),
    of one build; UsageError on a bad range, before anything is measured."""
    if not job.nightly_index:
        raise UsageError(NIGHTLIES_NEED)
    (good, good_label), (bad, bad_label) = parse_day(job.good), parse_day(job.bad)
    first, last = (bad, good) if job.find_fix else (good, bad)
    if first == last:
        raise UsageError(f"good and bad name the same day ({first})")
    if first > last:
        raise UsageError(f"good {good} is newer than bad {bad} (use --find-fix to search for a fix)")
    found = _merged(list_nightlies(job.nightly_index, job.package), stored_nightlies(stored))
    inside = [n for n in found if first <= n.day <= last]
    label = _label(good_label, bad_label, inside, job)
    days = between_days(found, first, last, label)
    listed = {f.parsed for f in found}   # (a set: 10,000 days against 10,000 nightlies was 10^8 comparisons)
    real = [n for n in days if n.parsed in listed]
    _endpoint(real, first, "--bad" if job.find_fix else "--good", job.bad if job.find_fix else job.good)
    _endpoint(real, last, "--good" if job.find_fix else "--bad", job.good if job.find_fix else job.bad)
    return Plan([candidate(job.package, n) for n in days])


def is_nightly_plan(plan: Plan) -> bool:
    """Whether the plan's candidates hold nightlies (the nightly level)."""
    return any(c.kind is CandidateKind.NIGHTLY for c in plan.candidates)
