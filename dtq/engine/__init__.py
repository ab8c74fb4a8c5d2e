"""The delivery engine: Redis keys, Lua scripts, submit, worker, scheduler and reaper."""
