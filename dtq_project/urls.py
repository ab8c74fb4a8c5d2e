"""URLs of the dtq demo project."""

from django.contrib import admin
from django.urls import include, path

from dtq.api.metrics import MetricsView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("dtq.api.urls")),
    path("metrics", MetricsView.as_view(), name="dtq-metrics"),
]
