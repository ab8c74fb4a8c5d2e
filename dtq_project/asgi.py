"""ASGI entry point of the dtq demo project."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_project.settings")
application = get_asgi_application()
