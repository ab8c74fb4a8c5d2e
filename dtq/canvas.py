"""Composed work: signatures, chains, groups and chords, enqueued as one workflow.

    dtq.chain(fetch.s(url), parse.s(), store.s())        # each result feeds the next step
    dtq.group(resize.s(i) for i in images)              # run in parallel
    dtq.chord(dtq.group(count.s(p) for p in parts), total.s())   # total([n1, n2, ...])

A step's input is its predecessor's result, prepended to its arguments (unless the step is
immutable: `.si()` or `.set(immutable=True)`); a group's result is the list of its members'
results in order; a chain's is its last step's. The composition is compiled into members
with fixed task ids and written to Redis at enqueue (dtq.engine.workflows).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from dtq.engine import workflows
from dtq.engine.errors import InvalidTaskError
from dtq.engine.submit import Submission
from dtq.engine.workflows import MemberSpec, Workflow, WorkflowNotFound

__all__ = [
    "Chain",
    "Chord",
    "Group",
    "Signature",
    "WorkflowNotFound",
    "WorkflowResult",
    "chain",
    "chord",
    "group",
    "signature",
]


class Canvas:
    """Something that can be enqueued as a workflow or composed into a bigger one."""

    def enqueue(self, *, on_failure: str = "stop") -> WorkflowResult:
        """Write the whole workflow and start the members that need no input.

        on_failure: 'stop' (a failed member stops the workflow: nothing more starts, the
        members still waiting or running are cancelled) or 'continue' (dependents still run,
        a failed input passed as {"dtq_failed": {task, state, error}}).
        """
        members: list[MemberSpec] = []
        result = self._compile(members, None)
        workflow_id = workflows.create(members, result, on_failure, self.label())
        return WorkflowResult(workflow_id)  # read lazily: a big workflow is a big read

    def __or__(self, other: Canvas) -> Chain:
        return Chain((self, other))

    def _compile(self, members: list[MemberSpec], previous: Any) -> Any:
        raise NotImplementedError

    def label(self) -> str:
        """Return a short description, shown on the admin page."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, eq=False)
class Signature(Canvas):
    """A task with bound arguments and options: one member of a workflow."""

    task: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # passed to task.using()

    def set(self, *, immutable: bool | None = None, **options: Any) -> Signature:
        """Return a copy with other options (priority, queue_name...) or immutability."""
        return replace(
            self,
            immutable=self.immutable if immutable is None else immutable,
            options={**self.options, **options},
        )

    def submission(self) -> Submission:
        """Build the engine submission of this step (validated now, not at release)."""
        task = self.task.using(**self.options) if self.options else self.task
        if hasattr(task, "submission") and not hasattr(task, "module_path"):
            sub: Submission = task.submission(self.args, self.kwargs)
        else:  # a django.tasks Task on DtqBackend
            from dtq.backends import submission

            sub = submission(task, self.args, self.kwargs)
        if sub.idempotency_key is not None:
            raise InvalidTaskError(f"{sub.name}: a workflow member cannot carry an idempotency key")
        if sub.delay:
            raise InvalidTaskError(f"{sub.name}: a workflow member cannot have run_after")
        return sub

    def _compile(self, members: list[MemberSpec], previous: Any) -> Any:
        index = len(members)
        members.append(
            MemberSpec(
                submission=self.submission(),
                deps=workflows.expression_members(previous),
                input=None if self.immutable else previous,
            )
        )
        return index

    def label(self) -> str:
        return str(getattr(self.task, "name", None) or self.task.module_path)


def signature(task: Any, *args: Any, **kwargs: Any) -> Signature:
    """Return a signature of any task (a @dtq.task, or a django.tasks task on DtqBackend)."""
    return Signature(task, tuple(args), dict(kwargs))


def _canvas(item: Any) -> Canvas:
    if not isinstance(item, Canvas):
        raise InvalidTaskError(f"expected a signature, chain, group or chord, got {item!r}")
    return item


@dataclass(frozen=True, slots=True, eq=False)
class Chain(Canvas):
    """Steps run one after another; each step starts only after the one before SUCCEEDED."""

    steps: tuple[Canvas, ...]

    def _compile(self, members: list[MemberSpec], previous: Any) -> Any:
        for step in self.steps:
            previous = step._compile(members, previous)
        return previous

    def label(self) -> str:
        return "chain(" + " | ".join(step.label() for step in self.steps) + ")"


@dataclass(frozen=True, slots=True, eq=False)
class Group(Canvas):
    """Members run in parallel; the group's result is the list of their results, in order."""

    members: tuple[Canvas, ...]

    def _compile(self, members: list[MemberSpec], previous: Any) -> Any:
        return [member._compile(members, previous) for member in self.members]

    def label(self) -> str:
        return f"group({len(self.members)})"


@dataclass(frozen=True, slots=True, eq=False)
class Chord(Canvas):
    """A group, then a callback that gets the list of the group's results."""

    header: Group
    body: Canvas

    def _compile(self, members: list[MemberSpec], previous: Any) -> Any:
        return self.body._compile(members, self.header._compile(members, previous))

    def label(self) -> str:
        return f"chord({self.header.label()} -> {self.body.label()})"


def chain(*steps: Any) -> Chain:
    """Return a chain of steps (signatures, groups, chords, chains)."""
    if not steps:
        raise InvalidTaskError("chain() needs at least one step")
    return Chain(tuple(_canvas(s) for s in steps))


def group(*members: Any) -> Group:
    """Return a group; takes signatures as arguments or one iterable of them."""
    if len(members) == 1 and isinstance(members[0], Iterable):
        members = tuple(members[0])
    return Group(tuple(_canvas(m) for m in members))


def chord(header: Any, body: Any) -> Chord:
    """Return a chord: the header group (or an iterable of signatures), then the body."""
    if not isinstance(header, Group):
        header = group(header)
    return Chord(header, _canvas(body))


@dataclass(slots=True)
class WorkflowResult:
    """A handle on an enqueued workflow: its id, state, members and (once done) its result."""

    id: str
    state: str = "RUNNING"
    workflow: Workflow | None = None

    @classmethod
    def load(cls, workflow_id: str) -> WorkflowResult:
        """Return the current view of a workflow (WorkflowNotFound if there is none)."""
        found = workflows.read(workflow_id)
        return cls(found.id, found.state, found)

    def refresh(self) -> None:
        """Read the workflow's current state and members again."""
        self.workflow = workflows.read(self.id)
        self.state = self.workflow.state

    @property
    def is_finished(self) -> bool:
        """Return True once the workflow SUCCEEDED, FAILED or was CANCELLED.

        A stopped workflow (FAILED) may still resume if its failed member is replayed.
        """
        return self.state in workflows.FINAL

    def _read(self) -> Workflow:
        if self.workflow is None:
            self.refresh()
        assert self.workflow is not None
        return self.workflow

    @property
    def members(self) -> list[workflows.Member]:
        """Return the members in compile order (a chain's steps, a group's members...)."""
        return self._read().members

    @property
    def results(self) -> list[Any]:
        """Return each member's result (None where it has none yet), in member order."""
        return [m.result for m in self.members]

    @property
    def return_value(self) -> Any:
        """Return the workflow's result: a chain's last result, a group's list, a chord's body's."""
        return self._read().result

    def wait(self, timeout: float = 30.0, interval: float = 0.05) -> WorkflowResult:
        """Refresh until finished or timeout seconds passed; return self."""
        deadline = time.monotonic() + timeout
        while True:
            self.refresh()
            if self.is_finished or time.monotonic() >= deadline:
                return self
            time.sleep(interval)

    def cancel(self) -> str:
        """Cancel the workflow (no audit row: operators use dtq.engine.ops.cancel_workflow)."""
        state = workflows.cancel(self.id)
        self.refresh()
        return state
