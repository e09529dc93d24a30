"""The probe contract page (probes/CONTRACT.md) is the result model rendered: the committed page equals what
bisector.core.result_contract renders (UPDATE_GOLDEN=1 rewrites it), every field of ProbeResult and of its
Device is on it with what bisector does with it, the variables it lists are the ones a probe run is given,
and the page ships with the probes."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

from bisector.core.facts import RESULT_ENV, Device, ProbeResult
from bisector.core.result_contract import PAGE, RUN_ENV, json_type, render_contract

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_the_rendering_of_the_model():
    path, text = ROOT / PAGE, render_contract()
    if os.environ.get("UPDATE_GOLDEN") or os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text, f"{PAGE} differs from the model (UPDATE_GOLDEN=1 rewrites it)"


def test_every_field_of_the_result_and_its_device_is_on_the_page_with_what_it_is_for():
    page = render_contract()
    for model in (ProbeResult, Device):
        for name, field in model.model_fields.items():
            assert (field.description or "").strip(), f"{model.__name__}.{name} has no description"
            assert f"| `{name}` | {json_type(field.annotation)} |" in page, f"{model.__name__}.{name}"
    assert "| `metrics` | object: name -> number | required |" in page
    assert "| `device` | object | optional |" in page and "## `device`" in page
    assert sum(line.startswith("| `") and "| required |" in line for line in page.splitlines()) == \
        len(ProbeResult.REQUIRED)


def test_the_types_are_json_types_in_words():
    assert json_type(dict[str, float]) == "object: name -> number"
    assert json_type(list[dict[str, int]]) == "array of object: name -> integers"
    assert json_type(int | None) == "integer" and json_type(Device) == "object"


def test_the_variables_it_lists_are_the_ones_a_probe_run_is_given():
    take = (ROOT / "bisector" / "measure" / "take.py").read_text()
    for name in RUN_ENV:
        assert name == RESULT_ENV or f'"{name}"' in take, name


def test_the_page_ships_with_the_probes():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert Path(PAGE).name in data["bisector.data.probes"] and Path(PAGE).parent.name == "probes"
