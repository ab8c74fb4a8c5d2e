"""Property-based run of schemathesis against GET /api/schema/, in-process through the WSGI app.

Every operation gets a bounded number of generated requests, sent with a superuser's token;
each response must be no 5xx, have a documented status and content type, and match the
schema. (ready/ is left out: it is 503 by design while no scheduler or reaper runs.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.test_api_support import api  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MAX_EXAMPLES = 8
PARAMETERLESS = {
    "GET /health/",
    "GET /queues/",
    "GET /workers/",
    "GET /schedules/",
    "GET /tasks/catalogue/",
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def token(api: Any) -> str:  # noqa: F811
    """A DRF token of a superuser (every permission: every operation is reachable)."""
    return Token.objects.create(user=api.user(is_superuser=True)).key


@pytest.fixture
def api_schema(token: str) -> Iterator[Any]:
    """The schema as GET /api/schema/ serves it, bound to Django's WSGI application."""
    # Like Django's test client: the test's database transaction must survive each request.
    request_started.disconnect(close_old_connections)
    try:
        headers = {"Authorization": f"Token {token}"}
        loaded = schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler(), headers=headers)
        yield loaded.exclude(path="/ready/")
    finally:
        request_started.connect(close_old_connections)


def run_operation(operation: Any, mode: GenerationMode, token: str) -> None:
    """Send generated requests for one operation and validate every response."""
    headers = {"Authorization": f"Token {token}"}

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    check()


# schemathesis' own pytest integration (from_fixture) does not run on pytest 9 yet, so the
# operations are walked here: one hypothesis run per operation and generation mode.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_matches_its_schema(api_schema: Any, token: str, mode: GenerationMode) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) == 45  # every operation but ready/
    for operation in operations:
        try:
            run_operation(operation, mode, token)
        except Unsatisfiable:
            # Nothing to make invalid: the operation takes no parameters and no body.
            assert mode == GenerationMode.NEGATIVE and operation.label in PARAMETERLESS
