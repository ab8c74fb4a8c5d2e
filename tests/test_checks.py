"""System checks for the DTQ settings."""

import pytest

from dtq.checks import check_redis, check_settings, redis_warnings


def ids(settings, **dtq):
    settings.DTQ = {**settings.DTQ, **dtq}
    return [e.id for e in check_settings()]


def test_valid_settings_pass(settings):
    assert ids(settings) == []


def test_unknown_key_is_an_error(settings):
    settings.DTQ = {**settings.DTQ, "REDIS_ULR": "redis://x"}
    errors = check_settings()
    assert [e.id for e in errors] == ["dtq.E001"]
    assert "REDIS_ULR" in errors[0].msg


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"HEARTBEAT_INTERVAL": 0}, "dtq.E002"),
        ({"VISIBILITY_TIMEOUT": "30"}, "dtq.E002"),
        ({"REDIS_URL": "localhost:6379"}, "dtq.E003"),
        ({"KEY_PREFIX": "a:b"}, "dtq.E004"),
        ({"SHARDS": 0}, "dtq.E005"),
        ({"TASK_MODULES": "myapp.jobs"}, "dtq.E006"),
        ({"DEFAULT_QUEUE": "has space"}, "dtq.E007"),
        ({"BLOCK_TIMEOUT": 20, "SOCKET_TIMEOUT": 10}, "dtq.E008"),
        ({"LEASE_TIMEOUT": 1, "HEARTBEAT_INTERVAL": 1}, "dtq.E009"),
        ({"DEFAULT_TIMEOUT": -5}, "dtq.E010"),
        ({"RETRY_JITTER": 2}, "dtq.E011"),
        ({"FINALIZE_FLUSH_MS": -1}, "dtq.E012"),
        ({"MAX_QUEUE_DEPTH": -1}, "dtq.E013"),
        ({"QUEUE_MAX_DEPTH": {"emails": "many"}}, "dtq.E014"),
        ({"READ_BUDGET": 10}, "dtq.E015"),
        ({"READ_BUDGET": "1000"}, "dtq.E015"),
        ({"API_READ_THROTTLE": "lots"}, "dtq.E022"),
    ],
)
def test_bad_values_are_reported(settings, overrides, expected):
    assert expected in ids(settings, **overrides)


def test_evicting_policy_and_old_redis_warn():
    assert [w.id for w in redis_warnings("7.0.15", "noeviction")] == []
    assert [w.id for w in redis_warnings("7.0.15", "allkeys-lru")] == ["dtq.W002"]
    assert [w.id for w in redis_warnings("6.0.9", "noeviction")] == ["dtq.W004"]


def test_redis_check_runs_with_database_flag(dtq_env):
    assert check_redis(databases=["default"]) == []
    assert check_redis() == []


def test_unreachable_redis_warns(settings, dtq_env):
    dtq_env.configure(REDIS_URL="redis://127.0.0.1:1/0", SOCKET_CONNECT_TIMEOUT=0.2)
    from dtq.engine import connection

    connection.reset()
    warnings = check_redis(databases=["default"])
    assert [w.id for w in warnings] == ["dtq.W001"]
