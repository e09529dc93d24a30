"""Which probe a job runs: one class per kind (``builtin``, ``script``, ``exit_code``, ``program``), each in its
own module over the shared base (``base.ProbeBase``: the fields, the protocol and the stored shape), and
``Probe``, the union a job, a diff and a matrix hold, chosen by the key a table gives (``name``, ``path``,
``cmd`` or ``command``)."""
from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import Discriminator, Tag, TypeAdapter

from bisector.job.probe.base import KIND_KEYS, ONE_KIND, ProbeBase
from bisector.job.probe.builtin import BuiltinProbe, builtin_names, builtin_script, builtin_version
from bisector.job.probe.exit_code import ExitCodeProbe
from bisector.job.probe.program import ProgramProbe
from bisector.job.probe.script import ScriptProbe

KINDS: dict[str, type[ProbeBase]] = {k.kind: k for k in (ProgramProbe, ExitCodeProbe, ScriptProbe, BuiltinProbe)}
_BY_KEY = {"command": ProgramProbe, "cmd": ExitCodeProbe, "path": ScriptProbe, "name": BuiltinProbe}


def kind_of(data: Any) -> Optional[str]:
    """The kind a raw ``[probe]`` table (or a probe) is: the first of ``command``, ``cmd``, ``path``, ``name`` it
    gives (a second one is refused by the kind's own validator); None when it gives none."""
    if isinstance(data, ProbeBase):
        return data.kind
    if isinstance(data, dict):
        return next((_BY_KEY[k].kind for k in ("command", "cmd", "path", "name") if data.get(k)), None)
    return None


Probe = Annotated[Union[tuple(Annotated[k, Tag(k.kind)] for k in KINDS.values())],   # type: ignore[misc]
                  Discriminator(kind_of, custom_error_type="probe_kind", custom_error_message=ONE_KIND)]
_ADAPTER: TypeAdapter = TypeAdapter(Probe)


def probe_from(data: Any) -> ProbeBase:
    """A raw ``[probe]`` table (or a stored one) as its kind; pydantic's ValidationError when it is none."""
    return _ADAPTER.validate_python(data)


def is_program(data: Any) -> bool:
    """Whether a raw ``[probe]`` table (or a probe) is a user's program (``-- CMD``)."""
    return kind_of(data) == ProgramProbe.kind


def raw_label(table: dict) -> Optional[str]:
    """How a raw ``[probe]`` table's probe is named in reports (its label), without validating the rest."""
    kind = kind_of(table)
    if kind is None:
        return None
    key = next(k for k, cls in _BY_KEY.items() if cls.kind == kind)
    try:
        return KINDS[kind].model_construct(**{key: table[key]}).label()
    except (TypeError, ValueError):
        return str(table[key])


__all__ = ["KIND_KEYS", "KINDS", "BuiltinProbe", "ExitCodeProbe", "Probe", "ProbeBase", "ProgramProbe", "ScriptProbe",
           "builtin_names", "builtin_script", "builtin_version", "is_program", "kind_of", "probe_from", "raw_label"]
