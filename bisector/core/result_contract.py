"""The probe contract page (probes/CONTRACT.md), rendered from the one result model: every field of
:class:`~bisector.core.facts.ProbeResult` and of its :class:`~bisector.core.facts.Device`, with its JSON type
and what bisector does with it (the fields' descriptions), the units a probe may declare and the suffixes
that give one (bisector.core.units), framed by how a probe is run. Pure: it returns the text; the unit test
tests/unit/test_result_contract.py keeps the committed page equal to it."""
from __future__ import annotations

import textwrap
import types
import typing
from typing import Any

from pydantic import BaseModel

from bisector.core.facts import RESULT_ENV, RESULT_MAX_BYTES, Device, ProbeResult
from bisector.core.units import declarable_units, suffix_units

PAGE = "probes/CONTRACT.md"
# the variables bisector sets for a probe run, beside the environment's own (bisector/measure/take.py)
RUN_ENV = {
    RESULT_ENV: "the file to write the result to (the write replaces it whole: write a temporary file beside "
                "it, then rename it over it)",
    "BISECTOR_PACKAGE": "the distribution under test (`accelerate`)",
    "BISECTOR_CANDIDATE": "the version or commit being measured",
    "BISECTOR_DEVICE": "`cpu` or `cuda`: the device the run measures on (a probe asked for `auto` uses it)",
    "BISECTOR_CPUS": "the CPU cores this probe run may use",
}
EXIT_SKIP = 125


def json_type(annotation: Any) -> str:
    """An annotation as a JSON type, in words (``dict[str, float]`` -> "object: name -> number")."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return json_type(kept[0]) if len(kept) == 1 else " or ".join(json_type(a) for a in kept)
    if origin is dict:
        inner = json_type(args[1]) if args else "any"
        return "object" if inner == "any" else f"object: name -> {inner}"
    if origin is list:
        inner = json_type(args[0]) if args else "any"
        return "array" if inner == "any" else f"array of {inner}s"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(annotation, "any")


def _cell(text: str) -> str:
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def _para(text: str, indent: str = "") -> str:
    """A paragraph wrapped at 110 columns (a list item's lines after the first indented by ``indent``)."""
    return textwrap.fill(_cell(text).replace("\\|", "|"), 110, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def field_rows(model: type[BaseModel], required: tuple[str, ...] = ()) -> list[str]:
    """The model's fields as table rows: name, JSON type, required or not, what bisector does with it."""
    rows = ["| field | type | | what bisector does with it |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        need = "required" if name in required else "optional"
        rows.append(f"| `{name}` | {json_type(field.annotation)} | {need} | {_cell(field.description or '')} |")
    return rows


def _units() -> list[str]:
    declared = ", ".join(f"`{u}`" for u in declarable_units() if u)
    suffixes = ", ".join(f"`_{s}` ({u})" for s, u in suffix_units().items())
    return [_para(
        f"A metric's unit is the one `units` declares for it: {declared}, `count` (no unit), in any case, or a "
        "short word of your own (up to 16 letters, digits and `%/µ°_ .-`, shown as written). Else its name's "
        f"suffix gives it: {suffixes}; a statistic may follow the suffix (`step_seconds_max`) and dotted "
        "qualifiers the name (`peak_bytes.fp32`), and `_per_s` is a rate, not seconds. Else the value is "
        "shown as the bare number: no unit is guessed.")]


def render_contract() -> str:
    """The whole page."""
    env = ["| variable | what |", "|---|---|", *(f"| `{k}` | {_cell(v)} |" for k, v in RUN_ENV.items())]
    lines = [
        "# The probe contract",
        "",
        "<!-- Rendered from the result model (bisector/core/facts.py: ProbeResult, Device) by",
        "     bisector/core/result_contract.py; tests/unit/test_result_contract.py keeps it so",
        "     (UPDATE_GOLDEN=1 rewrites it). Edit the model's descriptions, not this page. -->",
        "",
        _para("A probe is any program bisector runs inside a candidate environment (a virtualenv holding one "
              "version of the package under test) with that environment's Python, in a scratch working directory. "
              "It has what the environment holds (the ML stack: torch, transformers, accelerate), never bisector. "
              "Besides the environment's own variables it is given:"),
        "",
        *env,
        "",
        "It answers in one of two ways:",
        "",
        _para(f"1. **A result file**: one JSON object written to `${RESULT_ENV}`, at most "
              f"{RESULT_MAX_BYTES >> 20} MiB (bulky data goes to a file of the probe's own), then exit 0. It must "
              f"hold {', '.join(f'`{n}`' for n in ProbeResult.REQUIRED)}; the other fields below are optional. No "
              "result, one that is no JSON object, or metrics that are not all finite numbers are bad output. A "
              "non-zero exit is an error whose reason is the result's `error` (out of memory when it says so), "
              "else the last line of stderr; `error` with `missing_program` is an environment failure (SKIP).",
              "   "),
        _para(f"2. **An exit code** (`--probe-cmd`, `git bisect run`'s contract): 0 good, {EXIT_SKIP} skip "
              "(cannot be judged here), any other code from 1 to 127 bad. Nothing needs to be written.", "   "),
        "",
        "## The result",
        "",
        *field_rows(ProbeResult, ProbeResult.REQUIRED),
        "",
        _para("Any other field is kept with the result as written (stored with the measurement, read by the "
              "probe's explainer where it has one)."),
        "",
        "## `device`",
        "",
        _para(Device.__doc__ or ""),
        "",
        *field_rows(Device),
        "",
        "## Units",
        "",
        *_units(),
        "",
        "## The smallest result",
        "",
        "```json",
        '{"metrics": {"grad_bytes": 1048576.0}}',
        "```",
        "",
        "A built-in probe's fuller one, as `probes/import_cost.py` writes it:",
        "",
        "```json",
        '{"schema_version": "import_cost/1",',
        ' "probe": {"name": "import_cost", "version": "1.0.0", "config": {"module": "accelerate"}},',
        ' "metrics": {"import_seconds": 1.92, "import_rss_bytes": 301989888.0, "import_modules": 2716.0},',
        ' "versions": {"module": "1.16.0", "python": "3.11.7"}}',
        "```",
        "",
    ]
    return "\n".join(lines)
