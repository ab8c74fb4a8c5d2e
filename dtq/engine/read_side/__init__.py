"""Read side: what the admin, API and commands show (they send no Redis command themselves).

Lists come from registries and per-state index zsets, never from a SCAN of the keyspace, and
each function costs one or two pipelined round trips. Every read charges the commands it
sends to the request's read budget (budget.py) and sizes its pages to fit, so no request
costs more than DTQ['READ_BUDGET'] commands. The names below are the whole surface.
"""

from dtq.engine.read_side.budget import *  # noqa: F403
from dtq.engine.read_side.dlq import *  # noqa: F403
from dtq.engine.read_side.queues import *  # noqa: F403
from dtq.engine.read_side.search import *  # noqa: F403
from dtq.engine.read_side.tasks import *  # noqa: F403
