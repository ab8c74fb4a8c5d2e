"""Operations the chaos driver needs without an audit row (cancel), through the gateway."""

from __future__ import annotations

from typing import Any

from dtq.engine import gateway, ids, layout, shards


def cancel(task_id: str, queue: str, idem: str = "", reason: str = "chaos") -> list[Any]:
    """Cancel a task in its shard (or ask its worker to stop it); return cancel.lua's reply."""
    shard = ids.shard_of(task_id)
    ref = layout.TaskRef(task_id, queue, idem)
    kind, detail = gateway.cancel(shards.client(shard), shards.keys(shard), ref, reason)
    return [kind, detail] if detail else [kind]
