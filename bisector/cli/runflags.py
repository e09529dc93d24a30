"""Flags several commands share beside the job's own: which torch the candidates run on (``--torch``)
and how much goes to stderr while they run (``-q`` / ``-v``)."""
from __future__ import annotations

import argparse

from bisector.core.requirements import valid_torch_choice


def torch_choice(text: str) -> str:
    """--torch's value, checked (argparse's one-line error otherwise)."""
    try:
        return valid_torch_choice(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_torch_flag(g) -> None:
    """--torch: which torch the candidate environments run on."""
    g.add_argument("--torch", type=torch_choice, metavar="VERSION|current|per-candidate",
                   help="the torch under every candidate: current (bisector's interpreter's; the default when it "
                        "has one), a version (one base venv, built once), or per-candidate (each environment "
                        "resolves its own, as of its date)")


def add_output_flags(g) -> None:
    """-q / -v: how much goes to stderr while it runs."""
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines: only the result and errors")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="also what happens underneath: environment builds, installer steps, torch bases")
