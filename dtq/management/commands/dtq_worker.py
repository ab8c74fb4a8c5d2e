"""Run a dtq worker (optionally with the scheduler and reaper in the same process)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dtq.conf import dtq_settings
from dtq.engine.declared import declared
from dtq.engine.reaper import Reaper
from dtq.engine.scheduler import Scheduler
from dtq.engine.worker import Worker
from dtq.management.commands._common import (
    positive_float,
    positive_int,
    queue_name,
    setup_logging,
    warn_about_redis,
)

log = logging.getLogger("dtq.worker")


class Command(BaseCommand):
    help = "Run tasks from one or more queues until stopped (SIGTERM drains; twice stops now)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            type=queue_name,
            dest="queues",
            help="queue to serve (repeatable; default: DTQ['DEFAULT_QUEUE'])",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=positive_int,
            help="tasks run at once per process (default: WORKER_CONCURRENCY)",
        )
        parser.add_argument(
            "--processes",
            "-p",
            type=positive_int,
            default=1,
            help="worker processes to start (for CPU-bound tasks)",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="exit once the queues are empty and nothing is running",
        )
        parser.add_argument(
            "--max-tasks", type=positive_int, help="exit after finishing this many tasks"
        )
        parser.add_argument("--worker-id", help="name of this worker (default: host.pid.random)")
        parser.add_argument(
            "--shutdown-timeout",
            type=positive_float,
            default=30.0,
            help="seconds to let running tasks finish after SIGTERM (then exit; the reaper "
            "takes back what is left)",
        )
        parser.add_argument(
            "--with-scheduler", action="store_true", help="also run the scheduler in this process"
        )
        parser.add_argument(
            "--with-reaper", action="store_true", help="also run the reaper in this process"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        setup_logging(options["verbosity"])
        warn_about_redis()
        undeclared = sorted(set(options["queues"] or []) - declared())
        if undeclared:  # it may drain an old queue, but nothing new can arrive there
            log.warning("serving queues that are not declared queues=%s", ",".join(undeclared))
        if options["processes"] > 1:
            sys.exit(self._supervise(options))
        helpers: list[Scheduler | Reaper] = []
        if options["with_scheduler"]:
            helpers.append(Scheduler())
        if options["with_reaper"]:
            helpers.append(Reaper())
        worker = Worker(
            options["queues"] or [dtq_settings.DEFAULT_QUEUE],
            concurrency=options["concurrency"] or dtq_settings.WORKER_CONCURRENCY,
            worker_id=options["worker_id"],
            burst=options["burst"],
            max_tasks=options["max_tasks"],
            shutdown_timeout=options["shutdown_timeout"],
        )
        threads = [helper.start_thread() for helper in helpers]
        try:
            code = worker.run()
        finally:
            for helper in helpers:
                helper.stop()
            for thread in threads:
                thread.join(timeout=10)  # let them deregister before the process ends
        if worker.abandoned:
            # Handler threads past the shutdown timeout cannot be stopped, and the interpreter
            # would wait for them at exit while the reaper hands their attempts to others.
            logging.shutdown()
            sys.stdout.flush()
            os._exit(code)
        if code:
            sys.exit(code)

    def _supervise(self, options: dict[str, Any]) -> int:
        """Start one child worker per process and wait; signals are passed on to them."""
        argv = [*_this_program(), "dtq_worker"]
        for queue in options["queues"] or []:
            argv += ["--queue", queue]
        for flag in ("concurrency", "max_tasks", "shutdown_timeout"):
            if options[flag]:
                argv += [f"--{flag.replace('_', '-')}", str(options[flag])]
        if options["burst"]:
            argv.append("--burst")
        children = []
        for n in range(options["processes"]):
            extra = []
            if n == 0 and options["with_scheduler"]:
                extra.append("--with-scheduler")
            if n == 0 and options["with_reaper"]:
                extra.append("--with-reaper")
            if options["worker_id"]:
                extra += ["--worker-id", f"{options['worker_id']}-{n}"]
            children.append(subprocess.Popen(argv + extra))

        def forward(signum: int, frame: Any) -> None:
            for child in children:
                child.send_signal(signum)  # children drain on the first, stop on the second

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        codes = [child.wait() for child in children]
        return max(codes)


def _this_program() -> list[str]:
    """Return the command line that started this process, up to the subcommand."""
    main = sys.argv[0]
    if main.endswith(os.path.join("django", "__main__.py")):
        return [sys.executable, "-m", "django"]  # `python -m django`: re-run as a module
    return [sys.executable, main]
