"""Operations the chaos driver needs without an audit row (cancel), through the gateway."""

from __future__ import annotations

from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import gateway, layout
from dtq.engine.connection import get_client
from dtq.engine.keys import Keys


def cancel(task_id: str, queue: str, idem: str = "", reason: str = "chaos") -> list[Any]:
    """Cancel a task (or ask its worker to stop it); return cancel.lua's reply."""
    keys = Keys(dtq_settings.KEY_PREFIX, 0)
    kind, detail = gateway.cancel(get_client(), keys, layout.TaskRef(task_id, queue, idem), reason)
    return [kind, detail] if detail else [kind]
