"""URLs for the test suite."""

from django.contrib import admin
from django.urls import include, path

from dtq.api.metrics import MetricsView

urlpatterns = [path("admin/", admin.site.urls)]
urlpatterns += [
    path("api/", include("dtq.api.urls")),
    path("metrics", MetricsView.as_view(), name="dtq-metrics"),
]
