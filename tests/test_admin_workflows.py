"""The admin workflow page (Django's test client, real Redis, a real worker)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

import dtq
from dtq.models import AuditEntry
from dtq.views.workflows import MAX_DRAWN, levels
from tests.conftest import Env
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def url(name: str, *args: str) -> str:
    return reverse(f"admin:dtq_taskqueue_{name}", args=args)


@pytest.fixture
def operator(db: object) -> Client:
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def test_workflow_page_draws_the_graph_with_live_states(dtq_env: Env, operator: Client) -> None:
    dtq_env.worker()
    header = dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2))
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    wf.wait()
    page = operator.get(url("workflow", wf.id)).content.decode()
    assert 'id="dtq-workflow-graph"' in page
    assert page.count('class="dtq-node dtq-node-succeeded"') == 3
    assert page.count('class="dtq-edge"') == 2  # both header members feed the callback
    assert "3 of 3 finished" in page
    for member in wf.members:
        assert url("task", member.task_id) in page
    task_page = operator.get(url("task", wf.members[0].task_id)).content.decode()
    assert url("workflow", wf.id) in task_page  # the task page links to its workflow
    live = operator.get(url("workflow_live", wf.id)).content.decode()
    assert "<html" not in live and 'id="dtq-workflow-graph"' in live


def test_waiting_members_are_drawn_without_a_link(dtq_env: Env, operator: Client) -> None:
    wf = dtq.chain(tasks.wf_add.s(1), tasks.wf_add.s(2)).enqueue()  # no worker
    page = operator.get(url("workflow", wf.id)).content.decode()
    assert 'class="dtq-node dtq-node-waiting"' in page
    assert url("task", wf.members[1].task_id) not in page
    assert url("task", wf.members[0].task_id) in page


def test_cancel_button_cancels_the_workflow_and_audits(dtq_env: Env, operator: Client) -> None:
    wf = dtq.chain(tasks.wf_add.s(1), tasks.wf_add.s(2)).enqueue()
    page = operator.get(url("workflow", wf.id)).content.decode()
    assert 'id="dtq-workflow-cancel"' in page
    response = operator.post(url("workflow_cancel", wf.id), {"reason": "r"}, follow=True)
    assert "Workflow cancelled" in response.content.decode()
    wf.refresh()
    assert wf.state == "CANCELLED"
    assert AuditEntry.objects.get(action="cancel").parameters["workflow"] == wf.id


def test_big_group_draws_a_bounded_graph(dtq_env: Env, operator: Client) -> None:
    wf = dtq.chord(dtq.group(tasks.wf_add.s(i) for i in range(150)), tasks.wf_collect.s())
    result = wf.enqueue()
    page = operator.get(url("workflow", result.id)).content.decode()
    assert len(re.findall(r'class="dtq-node ', page)) == MAX_DRAWN + 1
    assert f"+{150 - MAX_DRAWN} more" in page
    assert levels(result.members)[-1] == 1


def test_unknown_workflow_is_404(dtq_env: Env, operator: Client) -> None:
    assert operator.get(url("workflow", "0" * 22)).status_code == 404
