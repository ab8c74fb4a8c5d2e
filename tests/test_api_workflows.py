"""GET /api/workflows/<id>/ and POST .../cancel/ on a real Redis with a real worker."""

from __future__ import annotations

import pytest

import dtq
from dtq.models import AuditEntry
from tests.conftest import Env, wait_for
from tests.test_api_support import Api, api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_workflow_detail_shows_members_progress_and_result(dtq_env: Env, api: Api) -> None:  # noqa: F811
    dtq_env.worker()
    wf = dtq.chord(dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2)), tasks.wf_collect.s())
    result = wf.enqueue()
    client = api.client("view")
    url = f"/api/workflows/{result.id}/"
    wait_for(lambda: client.get(url).json()["state"] == "SUCCEEDED")
    body = client.get(url).json()
    assert body["total"] == 3 and body["done"] == 3 and body["failed"] == 0
    assert body["on_failure"] == "stop"
    assert body["result"] == [1, 2]
    assert [m["state"] for m in body["members"]] == ["SUCCEEDED"] * 3
    assert body["members"][2]["deps"] == [0, 1]
    assert body["members"][2]["task"] == "tests.testapp.tasks.wf_collect"
    task = client.get(f"/api/tasks/{body['members'][0]['task_id']}/").json()
    assert task["workflow"] == result.id  # the task page links back to its workflow


def test_unknown_workflow_is_a_json_404(dtq_env: Env, api: Api) -> None:  # noqa: F811
    response = api.client("view").get(f"/api/workflows/{'0' * 22}/")
    assert_error(response, 404, "not_found")


def test_cancel_through_the_api_is_audited(dtq_env: Env, api: Api) -> None:  # noqa: F811
    result = dtq.chain(tasks.wf_add.s(1), tasks.wf_add.s(2)).enqueue()  # no worker: waits
    client = api.client("cancel", "view")
    response = post(client, f"/api/workflows/{result.id}/cancel/", {"reason": "not needed"})
    assert response.status_code == 200, response.content
    assert response.json() == {"workflow_id": result.id, "outcome": "RUNNING"}
    body = client.get(f"/api/workflows/{result.id}/").json()
    assert body["state"] == "CANCELLED"
    assert [m["state"] for m in body["members"]] == ["CANCELLED", "CANCELLED"]
    row = AuditEntry.objects.get(action="cancel")
    assert row.parameters["workflow"] == result.id and row.reason == "not needed"
    again = post(client, f"/api/workflows/{result.id}/cancel/", {})
    assert again.json()["outcome"] == "CANCELLED"
