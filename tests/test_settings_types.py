"""Typed settings: one dataclass gives each setting's type, default and rule; checks follow it."""

from __future__ import annotations

import re
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from dtq import conf
from dtq.checks import check_settings
from dtq.conf import DEFAULTS, RULES, Settings, dtq_settings, load, problems
from dtq.engine.errors import ConfigurationError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
HINTS = typing.get_type_hints(Settings)

# (setting, a value of the wrong type or range, what the error must say was expected)
WRONG = [
    ("SOCKET_TIMEOUT", "10", "a positive number"),
    ("SOCKET_TIMEOUT", True, "a positive number"),
    ("RESULT_TTL", 3600.5, "a positive whole number"),
    ("WORKER_CONCURRENCY", 0, "a positive whole number"),
    ("LEASE_TIMEOUT", "5", "None or a positive number"),
    ("RETRY_JITTER", -0.1, "between 0 and 1"),
    ("FINALIZE_FLUSH_MS", -1, "a number >= 0"),
    ("MAX_QUEUE_DEPTH", 1.5, "a whole number >= 0"),
    ("READ_BUDGET", 99, "a whole number >= 100"),
    ("DLQ_ENABLED", "yes", "True or False"),
    ("REDIS_CACHE", 5, "None or a cache alias"),
    ("AUDIT_DATABASE", ["default"], "None or a database alias"),
    ("TASK_MODULES", "myapp.jobs", "a list of module paths"),
    ("QUEUES", "default", "None or a list of queue names"),
    ("QUEUE_MAX_DEPTH", {"emails": -1}, "a dict of queue names to whole numbers >= 0"),
    ("API_IDEMPOTENCY_SCOPE", "everyone", "'user' or 'queue'"),
    ("API_SUBMIT_THROTTLE", 100, "None or a rate"),
    ("METRICS_TOKEN", "short", "None or a string of at least 16 characters"),
    ("SHARDS", 2000, "a whole number from 1 to 1024"),
    ("KEY_PREFIX", "a:b", "a key prefix"),
]


@pytest.mark.parametrize(("name", "value", "expected"), WRONG)
def test_a_wrong_value_is_a_check_error_naming_the_setting_and_the_expectation(
    settings: Any, name: str, value: Any, expected: str
) -> None:
    settings.DTQ = {**settings.DTQ, name: value}
    errors = check_settings()
    assert len(errors) == 1, errors
    (error,) = errors
    assert error.msg == f"DTQ['{name}'] must be {expected}, got {value!r}"
    assert error.id == f"dtq.E{RULES[name].check_id:03d}"
    assert error.hint


def test_a_setting_without_a_check_of_its_own_gets_e018(settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "DLQ_ENABLED": 1}
    assert [e.id for e in check_settings()] == ["dtq.E018"]


def test_every_bad_setting_is_reported_at_once(settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "RESULT_TTL": "1d", "RETRY_JITTER": 2, "DLQ_ENABLED": None}
    assert sorted(e.id for e in check_settings()) == ["dtq.E002", "dtq.E011", "dtq.E018"]


def test_reading_a_bad_setting_raises_a_clear_error(settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "REAPER_BATCH": "200"}
    with pytest.raises(ConfigurationError, match=r"DTQ\['REAPER_BATCH'\] must be a positive whole"):
        dtq_settings.REAPER_BATCH  # noqa: B018


def test_values_are_converted_to_the_field_types() -> None:
    loaded = load({"RESULT_TTL": 3600.0, "SOCKET_TIMEOUT": 3, "TASK_MODULES": ["a.b"]})
    assert loaded.RESULT_TTL == 3600 and isinstance(loaded.RESULT_TTL, int)
    assert loaded.SOCKET_TIMEOUT == 3.0 and isinstance(loaded.SOCKET_TIMEOUT, float)
    assert loaded.TASK_MODULES == ("a.b",)
    assert load({"QUEUES": ["default", "emails"]}).QUEUES == ("default", "emails")


def test_every_default_passes_its_own_rule_and_has_its_type() -> None:
    assert problems(DEFAULTS) == []
    defaults = Settings()
    for f in fields(Settings):
        value = getattr(defaults, f.name)
        assert RULES[f.name].convert(value) == value, f.name
        hint = HINTS[f.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = tuple(
            typing.get_origin(k) or k for k in (typing.get_args(hint) if union else (hint,))
        )
        assert isinstance(value, kinds), (f.name, value, kinds)


def test_the_accessor_is_typed_and_reloads_on_setting_changed(settings: Any) -> None:
    with override_settings(DTQ={**settings.DTQ, "REAPER_BATCH": 7}):
        assert dtq_settings.REAPER_BATCH == 7
    assert dtq_settings.REAPER_BATCH == Settings().REAPER_BATCH
    assert "REAPER_BATCH" in HINTS and HINTS["REAPER_BATCH"] is int


def test_unknown_attribute_and_unknown_key_are_errors(settings: Any) -> None:
    with pytest.raises(AttributeError, match="no DTQ setting 'NOPE'"):
        dtq_settings.NOPE  # type: ignore[attr-defined]  # noqa: B018
    settings.DTQ = {**settings.DTQ, "NOPE": 1}
    with pytest.raises(ConfigurationError, match="unknown DTQ setting"):
        dtq_settings.KEY_PREFIX  # noqa: B018


def test_the_lease_and_depth_helpers_read_typed_values() -> None:
    assert load({"HEARTBEAT_INTERVAL": 1}).lease_timeout == 5.0
    assert load({"LEASE_TIMEOUT": 4}).lease_timeout == 4.0
    depths = load({"MAX_QUEUE_DEPTH": 10, "QUEUE_MAX_DEPTH": {"emails": 0}})
    assert (depths.max_depth("emails"), depths.max_depth("other")) == (0, 10)


def test_conf_does_not_import_the_connection_module() -> None:
    source = Path(conf.__file__).read_text()
    assert "dtq.engine.connection" not in source and "import connection" not in source


def test_the_settings_docs_list_every_setting_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| `([^`]*)`", DOCS.read_text(), re.M))
    assert set(rows) == set(DEFAULTS)
    for name, default in DEFAULTS.items():
        assert rows[name] == repr(default).replace("'", '"'), name


def test_the_docs_list_the_positive_number_settings_of_e002() -> None:
    line = next(x for x in DOCS.read_text().splitlines() if x.startswith("| `dtq.E002`"))
    documented = set(re.findall(r"`([A-Z_]+)`", line))
    assert documented == {name for name, rule in RULES.items() if rule.check_id == 2}


def test_the_scheduler_liveness_follows_its_own_interval(dtq_env: Any) -> None:
    from dtq.engine.reaper import Reaper
    from dtq.engine.scheduler import Scheduler

    dtq_env.configure(SCHEDULER_INTERVAL=10.0, REAPER_INTERVAL=1.0)
    scheduler, reaper = Scheduler(), Reaper()
    scheduler._beat()
    reaper._beat()
    client = dtq_env.client
    assert client.ttl(scheduler.keys.process("scheduler", scheduler.process_id)) == 35
    assert client.ttl(reaper.keys.process("reaper", reaper.process_id)) == 10
    assert scheduler.interval() <= 10.0


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 2**63, -1, 0])
def test_numbers_outside_what_redis_and_floats_hold_are_refused(value: Any) -> None:
    (problem,) = problems({"RESULT_TTL": value})
    assert problem.name == "RESULT_TTL" and "a positive whole number" in problem.message
