"""Retry delays: exponential backoff with jitter, capped after the jitter is applied."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait before attempt n+1 after attempt n failed."""

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5  # fraction of the delay randomised in both directions

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Return the delay in seconds after failed attempt `attempt` (counting from 1)."""
        raw = self.base * (2 ** max(attempt - 1, 0))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, min(self.cap, raw * (1.0 + spread)))

    def as_dict(self) -> dict[str, float]:
        """Return the policy as stored on a task record."""
        return {"base": self.base, "cap": self.cap, "jitter": self.jitter}

    @classmethod
    def from_dict(cls, data: dict[str, float] | None) -> RetryPolicy:
        """Rebuild a policy stored on a task record."""
        return cls(**data) if data else cls()
