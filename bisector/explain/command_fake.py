"""What a user's program measured in fake mode (``--fake``: ``command/1`` with the meter ``cpu-dispatch (fake)``)
says about its numbers: they are fake tensors' live bytes, and where fake mode stopped the program, if it did."""
from __future__ import annotations

from typing import Any, Mapping

FAKE = "(fake)"


def compact_fake(result: Mapping[str, Any]) -> dict:
    """``{"fake": True, "fake_stopped": ...}`` of a fake-mode result (empty for any other)."""
    if FAKE not in str(result.get("meter") or ""):
        return {}
    out: dict[str, Any] = {"fake": True}
    if isinstance(result.get("fake_stopped"), str):
        out["fake_stopped"] = result["fake_stopped"][:600]
    return out


def fake_lines(details: Mapping[str, Any], side: str = "") -> list[str]:
    """The sentences of one measurement: what its bytes are, and where fake mode stopped the program."""
    if not details.get("fake"):
        return []
    lines = [] if side else ["Fake mode: the program ran on fake tensors (nothing allocated); its bytes are the fake "
                             "tensors' live bytes."]
    if details.get("fake_stopped"):
        said = f"{side}fake mode stopped the program {details['fake_stopped']}."
        lines.append(said[0].upper() + said[1:])
    return lines


def fake_pair(good_details: Mapping[str, Any], bad_details: Mapping[str, Any]) -> list[str]:
    """For last good against first bad: that the bytes are fake, once, and where each side stopped."""
    if not good_details.get("fake") and not bad_details.get("fake"):
        return []
    return (["Fake mode: both sides ran on fake tensors (nothing allocated); the bytes are the fake tensors' live "
             "bytes."] + fake_lines(good_details, "last good: ") + fake_lines(bad_details, "first bad: "))
