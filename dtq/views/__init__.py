"""Admin pages for dtq's non-model data (wired into the admin by dtq/admin.py)."""
