"""Django settings for the django.tasks backends under test (django-vtasks, django-tasks-redis)."""
