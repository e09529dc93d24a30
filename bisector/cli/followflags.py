"""``bisector run``'s flags for what a found boundary gets: companion attribution, --follow, and the
culprit's confirmation by revert (their [job] keys: attribute, follow, follow_repo, confirm_revert)."""
from __future__ import annotations

import argparse
from typing import Any


def add_followup_flags(p: argparse.ArgumentParser) -> None:
    """The 'after the boundary' group of ``bisector run``."""
    g = p.add_argument_group("after the boundary")
    g.add_argument("--attribute", action=argparse.BooleanOptionalAction, default=None,
                   help="when companions moved with the candidate, measure which change explains the step (default on)")
    g.add_argument("--follow", action=argparse.BooleanOptionalAction, default=None,
                   help="bisect the companion that explains the step between its two versions "
                        "(default: on when the cause is a companion)")
    g.add_argument("--follow-repo", metavar="REPO",
                   help="the companion's git repository (path or URL), to follow it down to its commits")
    g.add_argument("--confirm-revert", action=argparse.BooleanOptionalAction, default=None,
                   help="revert a commit culprit on the bad end and measure it (default on)")


def followup_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Those flags as [job] keys (None = not given)."""
    return {"attribute": args.attribute, "follow": args.follow, "follow_repo": args.follow_repo,
            "confirm_revert": args.confirm_revert}
