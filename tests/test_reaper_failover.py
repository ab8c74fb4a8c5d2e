"""The reaper holds recovery off after a failover as after a restart: another server answering
(a promoted replica, up for long, so its uptime says nothing) counts as Redis just started."""

from __future__ import annotations

import os
import time

from dtq.conf import dtq_settings
from dtq.engine.reaper import Reaper


def test_another_server_answering_holds_recovery_off_for_two_leases(dtq_env, private_redis):
    window = 2 * dtq_settings.lease_timeout
    time.sleep(window)  # the private server has been up for two leases: no restart to see
    reaper = Reaper()
    assert not reaper.redis_just_started()
    time.sleep(window)  # the suite's shared Redis has been up at least this long too
    dtq_env.use_server(os.environ["DTQ_REDIS_URL"])  # as a failover: same role, another server
    assert reaper.redis_just_started()
    time.sleep(window)
    assert not reaper.redis_just_started()
