"""Measure the bare at-least-once loop dtq's Redis CPU per task is compared with.

The loop keeps only what at-least-once needs: a record (hash) and a stream entry per task,
written by one script call at submit; a worker reads with XREADGROUP and claims in one script
call per batch (a fenced record write), then records the outcome and acknowledges (XACK,
XDEL) in one more. No index, counter, event, result key, lease or retry. Starts a private
redis-server on a free 127.0.0.1 port (never 6379), submits N tasks one call each, drains
them in batches, and prints Redis CPU (INFO cpu, user + sys) per task for each phase;
--callgrind runs the server under valgrind and prints thousands of instructions per task
instead (the figures scripts/script_instructions.py gives for dtq's own scripts).

    .venv/bin/python scripts/reference_loop.py [-n 10000] [--batch 8] [--callgrind]
"""

from __future__ import annotations

import argparse
import glob
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis_cost import free_port, wait_until_up

SUBMIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'state', 'QUEUED', 'name', ARGV[2], 'payload', ARGV[3],
  'attempt', '0')
redis.call('XADD', KEYS[2], '*', 't', ARGV[1])
return 1
"""
# The task records are named from the entries read: fine on one server, not on a cluster.
CLAIM = """
local read = redis.call('XREADGROUP', 'GROUP', 'g', ARGV[1], 'COUNT', ARGV[2],
  'STREAMS', KEYS[1], '>')
if not read then return {} end
local out = {}
for _, e in ipairs(read[1][2]) do
  local id = e[2][2]
  local r = redis.call('HMGET', 't:' .. id, 'state', 'name', 'payload', 'attempt')
  if r[1] == 'QUEUED' then
    redis.call('HSET', 't:' .. id, 'state', 'RUNNING', 'attempt', '1')
    out[#out + 1] = e[1]
    out[#out + 1] = id
  end
end
return out
"""
FINISH = """
local eids = {}
for i = 1, #ARGV, 3 do
  local k = 't:' .. ARGV[i + 1]
  if redis.call('HGET', k, 'state') == 'RUNNING' then
    redis.call('HSET', k, 'state', 'SUCCEEDED', 'result', ARGV[i + 2])
  end
  eids[#eids + 1] = ARGV[i]
end
redis.call('XACK', KEYS[1], 'g', unpack(eids))
redis.call('XDEL', KEYS[1], unpack(eids))
return #eids
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10000, help="tasks")
    parser.add_argument("--batch", type=int, default=8, help="entries per claim and finish")
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    opts = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dtq-reference-")
    port = free_port()
    server = [shutil.which("redis-server") or "/usr/bin/redis-server"]
    server += ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server += ["--dir", work]
    if opts.callgrind:
        cg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.out"]
        server = [*cg, *server, "--hz", "1"]
    proc = subprocess.Popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, decode_responses=True)
    try:
        wait_until_up(proc, client, seconds=60, what="redis-server")
        print(run(client, proc.pid, work, opts.n, opts.batch, opts.callgrind))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def run(client: redis.Redis, pid: int, work: str, n: int, batch: int, callgrind: bool) -> str:
    """Submit n tasks one call each, drain them; return the cost per task of each phase."""
    submit, claim, finish = (client.register_script(s) for s in (SUBMIT, CLAIM, FINISH))
    client.xgroup_create("s", "g", "0", mkstream=True)

    def mark(label: str) -> float:
        if callgrind:
            subprocess.run(["callgrind_control", "-d", label, str(pid)], capture_output=True)
            return 0.0
        cpu = client.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    start = mark("start")
    for i in range(n):
        submit(keys=[f"t:{i:022d}", "s"], args=[f"{i:022d}", "demo.add", "[[1,2],{}]"])
    submitted = mark("submitted")
    done = 0
    while done < n:
        got = claim(keys=["s"], args=["w", batch])
        if not got:
            break
        args = [a for j in range(0, len(got), 2) for a in (got[j], got[j + 1], "3")]
        done += int(finish(keys=["s"], args=args))
    drained = mark("drained")
    if not callgrind:
        return (
            f"Redis CPU us/task: submit {1e6 * (submitted - start) / n:.1f}  "
            f"drain {1e6 * (drained - submitted) / n:.1f}  (batch {batch}, {n} tasks)"
        )
    time.sleep(1)  # the dumps are written asynchronously
    totals = []  # per dump, in order: start-up, submit, drain
    for path in sorted(glob.glob(f"{work}/cg.out.*"), key=lambda p: int(p.rsplit(".", 1)[1])):
        for line in Path(path).read_text().splitlines():
            if line.startswith("totals:"):
                totals.append(int(line.split()[1]))
    return (
        f"kIr per task: submit {totals[1] / n / 1000:.1f}  drain {totals[2] / n / 1000:.1f}  "
        f"(batch {batch}, {n} tasks)"
    )


if __name__ == "__main__":
    main()
