"""dtq's REST API (Django REST framework): mount ``dtq.api.urls``; see docs/api.md.

Views call the engine's read side (dtq.engine.records) and operations (dtq.engine.ops) and
never send Redis commands themselves.
"""
