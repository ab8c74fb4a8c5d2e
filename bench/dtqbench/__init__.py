"""Minimal Django project + app used to benchmark dtq."""
