"""Bad settings are memsvc ValidationErrors naming the setting and its environment variable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memsvc import MemsvcError, Settings, ValidationError
from memsvc.core.settings import env_var

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
    # Durations within what PostgreSQL, Python and the OS represent.
    ("statement_timeout_ms", 2**31),  # PostgreSQL's timeouts are 32-bit milliseconds
    ("change_retention_days", 1e9),  # gc's cutoff would fall before year 1
    ("working_memory_default_ttl_seconds", 10**12),
    ("redis_timeout_s", "inf"),  # a socket timeout must be finite
    ("command_timeout_s", "nan"),
    ("checkpoint_keep_last", 2**31),  # checkpoint retention reaches SQL as a 32-bit count
    ("langgraph_checkpoint_keep_last", 10**20),
    ("hnsw_max_scan_tuples", 2**31),  # a PostgreSQL setting
    # An empty path or URL is never read as the current directory or libpq's defaults.
    ("data_dir", ""),
    ("data_dir", "  "),
    ("database_url", ""),
    ("redis_url", ""),
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


# Pairs of settings that cannot work together, each first named with the other.
COMBINATIONS = [
    ({"pool_min_size": 20, "pool_max_size": 10}, "pool_min_size", "pool_max_size"),
    ({"working_memory_require_redis": True}, "working_memory_require_redis", "redis_url"),
    ({"embedding_dim": 3072}, "embedding_dim", "vector_type"),  # HNSW: 2000 for vector
    ({"embedding_dim": 4001, "vector_type": "halfvec"}, "embedding_dim", "vector_type"),
    ({"hnsw_m": 48, "hnsw_ef_construction": 64}, "hnsw_ef_construction", "hnsw_m"),
    ({"replica_urls": ["postgresql://replica/db"]}, "replica_urls", "database_url"),
]


@pytest.mark.parametrize(("values", "setting", "other"), COMBINATIONS)
def test_settings_that_cannot_work_together_are_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, values: dict, setting: str, other: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(**values)
    assert raised.value.field == setting
    message = str(raised.value)
    assert other in raised.value.reason
    assert env_var(setting) in message and env_var(other) in message
    for name, value in values.items():  # the same from the environment
        text = json.dumps(value) if isinstance(value, list) else str(value)
        monkeypatch.setenv(env_var(name), text)
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert raised.value.field == setting and env_var(other) in str(raised.value)


def test_settings_that_work_together_are_accepted() -> None:
    Settings(pool_min_size=10, pool_max_size=10, hnsw_m=32, hnsw_ef_construction=64)
    Settings(embedding_dim=3072, vector_type="halfvec")
    Settings(database_url="postgresql://primary/db", replica_urls=["postgresql://r/db"])


def test_the_cli_refuses_a_pool_minimum_above_its_maximum_in_one_line() -> None:
    env = {"MEMSVC_POOL_MIN_SIZE": "20", "MEMSVC_POOL_MAX_SIZE": "10", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "memsvc", "stats"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: ValidationError: pool_min_size: is 20, above pool_max_size (10) (environment "
        "variables MEMSVC_POOL_MIN_SIZE, MEMSVC_POOL_MAX_SIZE)"
    ]


def test_an_empty_data_dir_creates_nothing_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSVC_DATA_DIR", "")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert raised.value.field == "data_dir" and "empty" in raised.value.reason
    assert list(tmp_path.iterdir()) == []
