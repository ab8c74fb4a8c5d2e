"""Websocket routes of dtq: include them in the project's ASGI URLRouter."""

from django.urls import path

from dtq.consumers import EventConsumer
from dtq.views.common import WS_PATH

websocket_urlpatterns = [
    path(WS_PATH, EventConsumer.as_asgi(), name="dtq-events"),
]
