"""Optional parts of dtq and the pip extra each one needs (see pyproject.toml)."""

from __future__ import annotations

from importlib.util import find_spec

from dtq.engine.errors import ConfigurationError

EXTRAS = {
    "api": "the REST API (dtq.api)",
    "live": "the admin's live events (dtq.consumers, dtq.routing)",
}


class MissingExtra(ConfigurationError, ImportError):
    """Raised when a module of dtq is imported without the pip extra it needs."""

    def __init__(self, extra: str, missing: str) -> None:
        super().__init__(
            f"{EXTRAS[extra]} needs {missing}, which is not installed: pip install 'dtq[{extra}]'"
        )


def missing_extra(extra: str, exc: ImportError) -> MissingExtra:
    """Return the MissingExtra for an ImportError raised by a module of that extra."""
    return MissingExtra(extra, exc.name or str(exc))


def require_extra(extra: str, *modules: str) -> None:
    """Raise MissingExtra naming the extra when one of modules is not installed."""
    missing = [name for name in modules if find_spec(name) is None]
    if missing:
        raise MissingExtra(extra, ", ".join(missing))
