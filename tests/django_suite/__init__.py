"""Run Django's own tests/tasks/ suite against DtqBackend (python -m tests.django_suite)."""
