"""App config of the demo tasks."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Demo tasks shown by `make demo`."""

    name = "dtq_project.demo"
    label = "dtq_demo"
