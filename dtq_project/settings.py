"""Settings of the dtq demo project (SQLite, Redis from DTQ_REDIS_URL).

DEBUG is off unless DJANGO_DEBUG=1 (only `make demo` sets it); the secret key comes from
DJANGO_SECRET_KEY or is generated once per checkout into var/secret_key.
"""

import contextlib
import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DTQ_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key(path: Path) -> str:
    """Return the key stored at path, creating it (readable by its owner only) on first use."""
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.touch(mode=0o600)
        tmp.write_text(secrets.token_urlsafe(50))
        # link() refuses an existing name: two processes starting at once agree on one key.
        try:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink()
    return path.read_text().strip()


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _secret_key(VAR_DIR / "secret_key")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
# Error pages and ADMINS e-mails list the settings: mask the password in DTQ["REDIS_URL"].
DEFAULT_EXCEPTION_REPORTER_FILTER = "dtq.reporting.RedisSafeExceptionReporterFilter"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dtq",
    "dtq_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dtq_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "dtq_project.wsgi.application"
ASGI_APPLICATION = "dtq_project.asgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "demo.sqlite3",
    }
}

STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"

DTQ = {
    "REDIS_URL": os.environ.get("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "KEY_PREFIX": os.environ.get("DTQ_KEY_PREFIX", "dtqdemo"),
    "REDIS_CLUSTER": os.environ.get("DTQ_REDIS_CLUSTER") == "1",  # URL names a cluster node
    "SHARDS": int(os.environ.get("DTQ_SHARDS", "1")),  # scripts/cluster_cost.py --shards
    "RETRY_BASE": 0.5,
    "RETRY_CAP": 5.0,
}

# REST API at /api/ (docs/api.md): DRF with token auth, OpenAPI schema, Swagger UI (no CDN).
INSTALLED_APPS += [
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
]

# Standard django.tasks code runs on dtq too (docs/django-tasks.md); see demo/tasks.py.
TASKS = {"default": {"BACKEND": "dtq.backends.DtqBackend", "QUEUES": [], "OPTIONS": {}}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "dtq.engine.connection.RedactFilter"}},  # Redis passwords
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact"]}},
    "loggers": {"dtq": {"handlers": ["console"], "level": "INFO"}},
}
