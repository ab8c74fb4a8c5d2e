"""Fault-injection suite: real processes, a seeded fault schedule, an offline checker."""
