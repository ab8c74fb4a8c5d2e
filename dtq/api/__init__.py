"""dtq's REST API (Django REST framework): mount ``dtq.api.urls``; see docs/api.md.

Views call the engine's read side (dtq.engine.read_side) and operations (dtq.engine.ops) and
never send Redis commands themselves. It needs the ``api`` extra: ``pip install 'dtq[api]'``.
"""

from dtq.extras import require_extra

require_extra("api", "rest_framework", "drf_spectacular")
