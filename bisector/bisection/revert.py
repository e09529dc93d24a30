"""Culprit confirmation by revert: the culprit commit's change reverted on the bad end of the range,
built and measured like any candidate.

The bad end is where the regression was reported, so the question is the maintainer's: does reverting
this commit there undo the step? The reverted tree comes from a 3-way apply of the culprit's inverse
diff (against its first parent) onto the bad end, in a scratch index (sources.git_trees.reverted_tree); its
environment is built from ``git archive`` of that tree, stamped ``<bad end>-revert-<culprit>``, which the
health check proves (so it can never be mistaken for the plain commit's environment). GOOD:
``confirmed``; BAD: ``not-causal`` (the commit is where the step shows, not what makes it); the inverse
diff does not apply: ``revert-conflict`` with the files; the reverted tree could not be measured:
``undecided``. It costs one environment and one probe.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from bisector.decide.judge import Judgement
from bisector.core.changes import Confirmation, ConfirmationStatus
from bisector.core.candidate import Candidate
from bisector.core.verdict import Verdict
from bisector.sources import git, git_trees

_STATUS = {Verdict.GOOD: ConfirmationStatus.CONFIRMED, Verdict.BAD: ConfirmationStatus.NOT_CAUSAL,
           Verdict.SKIP: ConfirmationStatus.UNDECIDED}


def confirm_by_revert(repo: Path, culprit: Candidate, onto: Candidate, judge: Callable[[Candidate], Judgement],
                      scratch: Path) -> Confirmation:
    """Revert ``culprit`` on ``onto`` (both commits of ``repo``), measure the reverted tree with ``judge``."""
    facts = {"culprit": culprit.ref, "onto": onto.ref}
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="revert-", dir=scratch) as tmp:
        try:
            tree, conflicts = git_trees.reverted_tree(repo, onto.ref, culprit.ref, Path(tmp))
        except git.GitFailure as exc:
            return Confirmation(status=ConfirmationStatus.UNDECIDED, reason=f"cannot revert: {exc}", **facts)
    what = f"reverting {culprit.short} on {onto.short}"
    if tree is None:
        return Confirmation(status=ConfirmationStatus.REVERT_CONFLICT, conflicts=conflicts,
                            reason=f"{what} does not apply cleanly: conflicts in {', '.join(conflicts)}", **facts)
    j = judge(onto.model_copy(update={"revert": culprit.ref}))
    value = f" ({j.value:.6g})" if j.value is not None else ""
    reason = f"{what} measured {j.verdict.value.upper()}{value}: {_meaning(j)}"
    return Confirmation(status=_STATUS[j.verdict], tree=tree, verdict=j.verdict, value=j.value, reason=reason,
                        measurements=[m.key for m in j.measurements], **facts)


def _meaning(j: Judgement) -> str:
    if j.verdict is Verdict.GOOD:
        return "the revert undoes the step"
    if j.verdict is Verdict.BAD:
        return "the step stays without this commit's change, so it is where the step shows, not its cause"
    return f"the reverted tree could not be judged ({j.reason})"
