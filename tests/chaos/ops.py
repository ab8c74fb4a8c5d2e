"""Operations the chaos driver needs that the engine does not expose yet (cancel).

dtq.engine.ops may grow a cancel(); until then this calls cancel.lua the way the engine's own
callers call a script: keys and the ARGV header from layout.build, arguments after it.
"""

from __future__ import annotations

from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import layout
from dtq.engine.connection import get_client
from dtq.engine.keys import Keys
from tests.script_calls import Scripts


def cancel(task_id: str, queue: str, idem: str = "", reason: str = "chaos") -> list[Any]:
    """Cancel a task (or ask its worker to stop it); return cancel.lua's reply."""
    keys = Keys(dtq_settings.KEY_PREFIX, 0)
    key_list, argv = layout.build(keys, [queue], [layout.TaskRef(task_id, queue, idem)])
    client = get_client()
    return list(Scripts.of(client).cancel(keys=key_list, args=[*argv, reason]))
