"""Bad settings are memsvc ValidationErrors naming the setting and its environment variable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from memsvc import MemsvcError, Settings, ValidationError
from memsvc.settings import env_var

# One bad value per kind of rule a setting can break.
BAD_VALUES = [
    ("embedding_dim", "abc"),  # not a number
    ("embedding_dim", 0),  # below the minimum
    ("pool_max_size", 0),
    ("connect_timeout_s", -1),
    ("distance", "manhattan"),  # not one of the choices
    ("db_schema", "Bad-Name"),  # our own validator
    ("auto_migrate", "perhaps"),
    ("exact_search_threshold", -5),
    ("text_search_config", "english'; DROP TABLE x; --"),  # interpolated: identifiers only
]


@pytest.mark.parametrize(("setting", "value"), BAD_VALUES)
def test_a_bad_setting_in_code_is_a_validation_error_naming_it(setting: str, value: object) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(**{setting: value})
    error = raised.value
    assert isinstance(error, MemsvcError)
    assert error.field == setting
    assert str(error).startswith(f"{setting}: ")
    assert env_var(setting) in str(error)
    assert "\n" not in str(error) and "errors.pydantic.dev" not in str(error)


@pytest.mark.parametrize(("setting", "value"), BAD_VALUES)
def test_a_bad_environment_variable_is_a_validation_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, setting: str, value: object
) -> None:
    monkeypatch.setenv(env_var(setting), str(value))
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert raised.value.field == setting and env_var(setting) in str(raised.value)


def test_an_unknown_setting_is_named() -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(embeding_dim=3)  # type: ignore[call-arg]
    assert raised.value.field == "embeding_dim"


def test_several_bad_settings_are_all_named_on_one_line() -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(pool_max_size=0, hnsw_m=1)
    message = str(raised.value)
    assert "MEMSVC_POOL_MAX_SIZE" in message and "MEMSVC_HNSW_M" in message
    assert "\n" not in message


def test_a_bad_database_url_value_is_not_echoed() -> None:
    # Values are left out of the message: a URL may carry a password.
    with pytest.raises(ValidationError) as raised:
        Settings(database_url=["postgresql://u:secret@h/db"])  # type: ignore[arg-type]
    assert raised.value.field == "database_url" and "secret" not in str(raised.value)


def test_the_cli_prints_one_line_for_a_bad_setting() -> None:
    env = {"MEMSVC_EMBEDDING_DIM": "abc", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "memsvc", "stats"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: ValidationError: embedding_dim: Input should be a valid integer, unable to "
        "parse string as an integer (environment variable MEMSVC_EMBEDDING_DIM)"
    ]


def test_the_settings_page_lists_every_setting_with_its_variable() -> None:
    page = (Path(__file__).parent.parent / "docs" / "reference" / "settings.md").read_text()
    listed = dict(re.findall(r"^\| `(\w+)` \| `(MEMSVC_\w+)` \|", page, flags=re.MULTILINE))
    assert listed == {name: env_var(name) for name in Settings.model_fields}
