"""System checks of the Cluster, Sentinel and durable-submit settings (dtq.E030-E037)."""

import pytest

from dtq.checks import check_settings

SENTINELS = [("10.0.0.1", 26379), ("10.0.0.2", 26379)]


def ids(settings, **dtq):
    settings.DTQ = {**settings.DTQ, **dtq}
    return [e.id for e in check_settings()]


@pytest.mark.parametrize(
    "overrides",
    [
        {"REDIS_CLUSTER": True, "REDIS_URL": "redis://10.0.1.7:6379"},
        {"REDIS_CLUSTER": True, "REDIS_URL": "redis://:secret@10.0.1.7:6379/0"},
        {"REDIS_SENTINELS": SENTINELS, "REDIS_SENTINEL_SERVICE": "dtq"},
        # JSON has no tuples: settings passed through the environment arrive as lists.
        {"REDIS_SENTINELS": [["10.0.0.1", 26379]], "REDIS_SENTINEL_SERVICE": "dtq"},
        {"SUBMIT_REPLICAS": 2, "SUBMIT_REPLICAS_TIMEOUT": 0.5},
    ],
)
def test_valid_topologies_pass(settings, overrides):
    assert ids(settings, **overrides) == []


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"REDIS_CLUSTER": "yes"}, "dtq.E030"),
        ({"REDIS_SENTINELS": [], "REDIS_SENTINEL_SERVICE": "dtq"}, "dtq.E031"),
        ({"REDIS_SENTINELS": ["10.0.0.1:26379"], "REDIS_SENTINEL_SERVICE": "dtq"}, "dtq.E031"),
        ({"REDIS_SENTINELS": [("h", 0)], "REDIS_SENTINEL_SERVICE": "dtq"}, "dtq.E031"),
        ({"REDIS_SENTINELS": SENTINELS}, "dtq.E032"),
        ({"REDIS_SENTINEL_SERVICE": "dtq"}, "dtq.E032"),
        (
            {"REDIS_SENTINELS": SENTINELS, "REDIS_SENTINEL_SERVICE": "d", "REDIS_CLUSTER": True},
            "dtq.E033",
        ),
        ({"REDIS_CLUSTER": True, "REDIS_URL": "redis://10.0.1.7:6379/2"}, "dtq.E034"),
        ({"REDIS_CLUSTER": True, "REDIS_URL": "rediss://10.0.1.7:6379"}, "dtq.E035"),
        (
            {"REDIS_SENTINELS": SENTINELS, "REDIS_SENTINEL_SERVICE": "d", "REDIS_URL": "unix:///s"},
            "dtq.E035",
        ),
        ({"SUBMIT_REPLICAS": -1}, "dtq.E036"),
        ({"SUBMIT_REPLICAS": True}, "dtq.E036"),
        ({"SUBMIT_REPLICAS": 1.5}, "dtq.E036"),
        ({"SUBMIT_REPLICAS_TIMEOUT": 0}, "dtq.E037"),
        ({"SUBMIT_REPLICAS_TIMEOUT": "1s"}, "dtq.E037"),
    ],
)
def test_topology_mistakes_are_named(settings, overrides, expected):
    assert expected in ids(settings, **overrides)


def test_the_message_says_what_was_wrong(settings):
    settings.DTQ = {**settings.DTQ, "REDIS_CLUSTER": True, "REDIS_URL": "redis://:pw123456@h:1/3"}
    (error,) = check_settings()
    assert error.id == "dtq.E034" and "database 0 only" in error.msg
    assert "pw123456" not in error.msg
