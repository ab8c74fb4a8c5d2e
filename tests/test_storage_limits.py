"""Storage limits by default, and check --deploy warnings for what is left unlimited."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks

from dtq.conf import DEFAULTS
from dtq.engine.errors import PayloadError, QueueFull
from tests.testapp import tasks


@pytest.fixture
def deploy_ids(settings, dtq_env):
    """Return f(**dtq): the dtq ids check --deploy reports with these settings changed."""
    base = dict(settings.DTQ)

    def ids(**dtq) -> list[str]:
        settings.DTQ = {**base, "REDIS_URL": dtq_env.url, **dtq}
        found = run_checks(include_deployment_checks=True, tags=["security"])
        return sorted(m.id for m in found if m.id and m.id.startswith("dtq."))

    return ids


THROTTLED = {"API_SUBMIT_THROTTLE": "100/minute", "API_READ_THROTTLE": "600/minute"}


def test_defaults_limit_depth_and_payload(dtq_env):
    assert DEFAULTS["MAX_QUEUE_DEPTH"] == 100_000
    assert DEFAULTS["MAX_PAYLOAD_BYTES"] == 64 * 1024
    tasks.record.enqueue("x" * 60_000)
    with pytest.raises(PayloadError, match="limit is 65536"):
        tasks.record.enqueue("x" * 70_000)
    dtq_env.client.hset(dtq_env.keys.stats("tests"), "active", 100_000)  # a full backlog
    with pytest.raises(QueueFull, match="100000 tasks"):
        tasks.record.enqueue()


def test_deploy_check_is_quiet_with_limits_and_throttles(deploy_ids):
    assert deploy_ids(**THROTTLED) == []


def test_deploy_check_warns_about_unlimited_settings(deploy_ids):
    assert deploy_ids() == ["dtq.W012", "dtq.W013"]
    assert deploy_ids(**THROTTLED, MAX_QUEUE_DEPTH=0) == ["dtq.W010"]
    assert deploy_ids(**THROTTLED, QUEUE_MAX_DEPTH={"tests": 0}) == ["dtq.W010"]
    assert deploy_ids(**THROTTLED, MAX_PAYLOAD_BYTES=2**21) == ["dtq.W011"]


def test_deploy_check_warns_when_redis_may_evict(dtq_env, private_redis, deploy_ids):
    dtq_env.client.config_set("maxmemory-policy", "allkeys-lru")
    assert deploy_ids(**THROTTLED) == ["dtq.W002"]
