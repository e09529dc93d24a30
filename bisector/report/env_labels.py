"""The environment's facts as reports name them: the one table of their keys (a typed fact, a field of
:class:`bisector.core.points.PointEnv`, under the key the JSON report prints and the markdown and text
show), the words a sentence shows some keys by, and a result's JSON with every environment as that flat
mapping (what ``bisector.report/2`` has always printed)."""
from __future__ import annotations

from typing import Any

from bisector.core.points import PointEnv
from bisector.core.result import BisectResult

# field -> key, in the order a report shows them: the OS, the interpreter, torch, the device, the meter; the
# packages come after these, a run's env spec and base last
KEYS = {"os": "os", "python": "python", "torch": "torch", "torch_from": "torch from", "torch_git": "torch git",
        "cuda": "cuda", "gpu": "gpu", "driver": "driver", "cpu": "cpu", "meter": "meter"}
LAST = {"env_spec": "env spec", "env_base": "env base"}
WHERE = ("os", "env spec", "env base")   # the keys that say where a run ran, not what its environment held
LABELS = {"os": "OS", "python": "Python", "cuda": "CUDA", "gpu": "GPU", "cpu": "CPU"}   # key -> shown words
POINTS = ("first_bad", "last_good", "good_end", "bad_end")   # a result's points, each with its environment


def flat(env: PointEnv) -> dict[str, str]:
    """Every fact that is known under its key, in the report's order (see :data:`KEYS`)."""
    def known(table: dict[str, str]) -> dict[str, str]:
        return {key: value for name, key in table.items() if (value := getattr(env, name, None)) not in (None, "")}
    return {**known(KEYS), **env.packages, **known(LAST)}


def held(env: PointEnv) -> dict[str, str]:
    """What the environment held beyond its interpreter and device, under its keys: torch (where it came
    from, its commit) and every package."""
    torch = {KEYS[name] for name in ("torch", "torch_from", "torch_git")}
    return {k: v for k, v in flat(env).items() if k in torch or k in env.packages}


def flat_environments(data: dict[str, Any], result: BisectResult) -> dict[str, Any]:
    """``data`` (``result``'s JSON) with its environment, each point's and a followed bisect's as the flat
    mapping (in place; returned)."""
    if "environment" in data:
        data["environment"] = flat(result.environment)
    points = [(data.get(k), getattr(result, k)) for k in POINTS]
    if result.contrast is not None and data.get("contrast"):
        points += list(zip(data["contrast"].get("points") or [], result.contrast.points))
    for shown, point in points:
        if shown and point is not None and "env" in shown:
            shown["env"] = flat(point.env)
    if data.get("followed") and result.followed is not None:
        flat_environments(data["followed"], result.followed)
    return data
