"""The command-line grammar of the init-time probes in bench/probes/."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "probes"))

from init_diagnostics import parse_variant  # noqa: E402  (bench/probes/)


def test_variant_overrides_are_typed_as_the_config_fields_they_set():
  """`variant@field=value`: numbers become numbers, true/false booleans (a bool field refuses
  the int 1), anything else stays a string; a leading `model.` is optional."""
  name, overrides = parse_variant(
      "lion_s_s5_form@complex_input=true@model.feedthrough=False@key_dim=4@dt_max=0.1"
      "@v_init=lecun")
  assert name == "lion_s_s5_form"
  assert overrides == {"complex_input": True, "feedthrough": False, "key_dim": 4,
                       "dt_max": 0.1, "v_init": "lecun"}
  assert type(overrides["complex_input"]) is bool and type(overrides["key_dim"]) is int


def test_an_override_without_a_value_names_the_entry():
  with pytest.raises(SystemExit, match="lion_s@v_init.*is not FIELD=VALUE"):
    parse_variant("lion_s@v_init")
