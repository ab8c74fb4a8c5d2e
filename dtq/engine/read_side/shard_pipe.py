"""One pipeline over several shards: one round trip per primary, replies in the order queued.

On one server (or behind Sentinel) every shard's client is the same, so commands for all
shards go out in one round trip. On a Redis Cluster each shard's keys live on the primary of
its slot: commands are grouped per client, each group sent in one pipelined round trip.
"""

from __future__ import annotations

from typing import Any

from dtq.engine import shards


class ShardPipeline:
    """Queue commands per shard (`on(shard).<command>(...)`), then execute() them all."""

    def __init__(self) -> None:
        self._pipes: dict[int, Any] = {}  # id(client) -> its pipeline
        self._places: list[tuple[int, int]] = []  # per command: (id(client), index in its pipe)

    def on(self, shard: int) -> _ShardCommands:
        """Return where commands for this shard's keys are queued."""
        client = shards.client(shard)
        pipe = self._pipes.get(id(client))
        if pipe is None:
            pipe = self._pipes[id(client)] = client.pipeline(transaction=False)
        return _ShardCommands(self, id(client), pipe)

    def __len__(self) -> int:
        return len(self._places)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every group in one round trip each; return the replies in queued order."""
        replies = {
            owner: pipe.execute(raise_on_error=raise_on_error)
            for owner, pipe in self._pipes.items()
            if len(pipe)
        }
        return [replies[owner][index] for owner, index in self._places]


class _ShardCommands:
    """The commands of one shard's client; each call queues one command and records where."""

    def __init__(self, owner: ShardPipeline, client_id: int, pipe: Any) -> None:
        self._owner, self._client_id, self._pipe = owner, client_id, pipe

    def __getattr__(self, name: str) -> Any:
        command = getattr(self._pipe, name)

        def queue(*args: Any, **kwargs: Any) -> None:
            self._owner._places.append((self._client_id, len(self._pipe)))
            command(*args, **kwargs)

        return queue
