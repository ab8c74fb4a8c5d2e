"""Task ids: their shape, the shard and creation time they carry, their order."""

import time

from dtq.engine import ids


def test_a_new_id_carries_its_shard_and_creation_time():
    for shard in (0, 1, 31, 32, 1023):
        before = time.time_ns() // 1_000_000
        task_id = ids.new_id(shard)
        after = time.time_ns() // 1_000_000
        assert ids.is_valid(task_id)
        assert ids.shard_of(task_id) == shard
        assert before <= ids.created_ms(task_id) <= after


def test_ids_made_in_one_millisecond_differ_and_later_ones_sort_after():
    many = [ids.new_id(3) for _ in range(2000)]
    assert len(set(many)) == len(many)
    first = ids.new_id(3)
    time.sleep(0.002)
    assert ids.new_id(3) > first
    assert ids.new_id(0)[10:12] != ids.new_id(1)[10:12]
