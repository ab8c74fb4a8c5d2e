"""Shared helpers for the dtq benchmark harness (stdlib + psutil only)."""
