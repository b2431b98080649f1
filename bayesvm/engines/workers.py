"""Independent jobs in worker processes that end with their parent: Gibbs chains and cross-fitting's fold fits.

Each job runs in its own forked process and sends its result back through a pipe; nothing else (no pool, no
manager thread) stands between the parent and its workers.  On Ctrl-C or SIGTERM the workers are terminated before
the exception propagates, and a worker whose parent disappears (e.g. killed) ends itself within a second.  A job's
exception is raised in the parent; a worker that dies without a result raises ``RuntimeError``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

#: Seconds between a worker's checks that its parent process is still alive.
PARENT_CHECK_SECONDS = 0.5
#: Seconds the parent waits on its workers' pipes before it looks at pending signals again.
SIGNAL_CHECK_SECONDS = 0.25


def _end_with_parent(parent: int) -> None:
    """Set up a worker: a daemon thread ends it once its parent is gone (terminated, killed or crashed: the worker is
    then re-parented and ``os.getppid()`` changes), so no job outlives its run.

    The worker is forked inside :func:`_sigterm_raises`, so it would inherit the handler that turns SIGTERM into
    ``SystemExit``; SIGTERM (what :func:`_stop_workers` sends) is restored to its default, ending the worker at
    once, and Ctrl-C, which a terminal sends to the whole process group, is ignored here: the parent ends the
    workers.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])  # (a mask is inherited from the forking thread)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_SECONDS)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="bayesvm-parent-watch", daemon=True).start()


def _worker(function: Callable, args: tuple, parent: int, send) -> None:
    """A worker process: run ``function(*args)`` and send ``("ok", result)`` or ``("error", exception)``."""
    _end_with_parent(parent)
    try:
        message = ("ok", function(*args))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent, which raises it
        message = ("error", exc)
    try:
        send.send(message)
    except Exception as exc:  # an exception that does not pickle: its text
        send.send(("error", RuntimeError(f"{type(message[1]).__name__}: {message[1]} ({exc})")))
    send.close()


@contextmanager
def _sigterm_raises():
    """In the main thread, SIGTERM raises ``SystemExit`` (as Ctrl-C raises ``KeyboardInterrupt``), so that the
    workers below are ended instead of the process dying with them still running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_workers(processes) -> None:
    """Terminate every worker process now (SIGTERM, then SIGKILL after 5 seconds)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)


def run_in_processes(
    jobs: Sequence[tuple[Callable, tuple]],
    cores: int,
    label: str,
    warm_up: Callable[[], None] | None = None,
    on_result: Callable[[int], None] | None = None,
) -> list[Any]:
    """``[function(*args) for function, args in jobs]``, at most ``cores`` of them at a time, each in a worker process
    (the module docstring); ``label`` names a job in errors (``"Gibbs chain"``: "the process of Gibbs chain 2 ended
    without a result").  ``warm_up()`` runs here first where workers are forked (what it loads, they inherit);
    ``on_result(index)`` is called in this process as each job's result arrives."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context()
    if warm_up is not None and context.get_start_method() == "fork":
        warm_up()
    results: list = [None] * len(jobs)
    waiting = list(range(len(jobs)))
    running: dict = {}  # receiving end -> (job index, process)
    try:
        with _sigterm_raises():
            while waiting or running:
                while waiting and len(running) < max(1, cores):
                    i = waiting.pop(0)
                    function, args = jobs[i]
                    receive, send = context.Pipe(duplex=False)
                    process = context.Process(
                        target=_worker,
                        args=(function, args, os.getpid(), send),
                        name=f"bayesvm-{label.replace(' ', '-').lower()}-{i}",
                        daemon=True,
                    )
                    process.start()
                    send.close()
                    running[receive] = (i, process)
                # a timeout, so that the main thread wakes up to run a pending Ctrl-C / SIGTERM handler: the kernel
                # may deliver a process-directed signal to another thread (BLAS, numba), which leaves a select()
                # without timeout asleep in the main thread (seen as a hang under load)
                for receive in wait(list(running), timeout=SIGNAL_CHECK_SECONDS):
                    i, process = running[receive]  # (still listed: an interrupt during recv ends it too)
                    try:
                        status, payload = receive.recv()
                    except EOFError:
                        process.join()
                        raise RuntimeError(
                            f"the process of {label} {i + 1} ended without a result (exit code "
                            f"{process.exitcode}); memory may have run out: try fewer cores"
                        ) from None
                    del running[receive]
                    receive.close()
                    process.join()
                    if status == "error":
                        raise payload
                    results[i] = payload
                    if on_result is not None:
                        on_result(i)
    except BaseException:
        _stop_workers([process for _, process in running.values()])
        for receive in running:
            receive.close()
        raise
    return results
