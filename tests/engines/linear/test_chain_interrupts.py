"""Worker processes (Gibbs chains, cross-fitting's fold fits: bayesvm.engines.workers) end with their parent: on
SIGTERM, on Ctrl-C and when the parent is killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, signal, sys

    # a terminal's process: Ctrl-C unblocked and raising KeyboardInterrupt.  A test runner's worker can hand its
    # children SIGINT blocked (inherited through fork and exec; seen under pytest-xdist), and a blocked signal
    # is never delivered: this is reported, then undone before numpy starts its threads (they inherit the mask)
    blocked = sorted(signal.Signals(s).name for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    print(f"inherited: SIGINT handler {signal.getsignal(signal.SIGINT)}, blocked {blocked}", file=sys.stderr)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np, pandas as pd
    import bayesvm

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's diagnosis if the parent does not end
    if os.environ.get("BAYESVM_TEST_OTHER_THREAD"):
        # the kernel may hand a process-directed signal to any thread that does not block it (a BLAS or numba
        # thread); force that here: a helper thread takes SIGINT / SIGTERM, the main thread blocks them
        import threading, time

        threading.Thread(target=lambda: time.sleep(10**6), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM])

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"x": rng.standard_normal(n), "g": rng.integers(0, 20, n)})
    frame["y"] = np.where(frame["x"] + rng.logistic(size=n) > 0, 1, 0)
    if os.environ.get("BAYESVM_TEST_JOB") == "folds":  # the calibration's fold fits, each as long as a test
        import time
        import bayesvm.results.crossfit as crossfit

        fit = bayesvm.bsvm("y ~ x + (1 | g)", frame, vb="meanfield")
        crossfit.fold_processes = lambda fit, folds: 2
        refit = crossfit.REFITTERS["bsvm"]
        crossfit.REFITTERS["bsvm"] = lambda *args, **kwargs: time.sleep(10**6) or refit(*args, **kwargs)
        print("ready", flush=True)
        fit.calibrate()
    print("ready", flush=True)
    bayesvm.bsvm("y ~ x + (1 | g)", frame, method="gibbs", draws=10**6, tune=10, chains=2, cores=2,
                 progress=False)
    """
)


def _children(pid: int) -> set[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_and_find_workers(tmp_path, other_thread: bool = False, job: str = "chains"):
    script = tmp_path / "chains.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "BAYESVM_TEST_OTHER_THREAD": "1" if other_thread else "", "BAYESVM_TEST_JOB": job}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert parent.stdout.readline().strip() == "ready"
    deadline = time.time() + 60
    workers: set[int] = set()
    while time.time() < deadline and len(workers) < 2:
        time.sleep(0.2)
        workers = _children(parent.pid)
    assert len(workers) >= 2, f"the {job} workers did not start"
    time.sleep(1.0)  # the workers are sampling
    return parent, workers


def _gone_within(pids: set[int], seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize(
    "how, other_thread",
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGKILL, False), (signal.SIGINT, True),
     (signal.SIGTERM, True)],
    ids=["SIGTERM", "SIGINT", "SIGKILL", "SIGINT-to-another-thread", "SIGTERM-to-another-thread"],
)  # fmt: skip
def test_workers_end_with_the_parent(tmp_path, how, other_thread):
    _workers_end_with_the_parent(tmp_path, how, other_thread, "chains")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_fold_fit_workers_end_with_the_parent(tmp_path, how):
    _workers_end_with_the_parent(tmp_path, how, False, "folds")


def _workers_end_with_the_parent(tmp_path, how, other_thread, job):
    parent, workers = _start_and_find_workers(tmp_path, other_thread, job)
    try:
        os.kill(parent.pid, how)
        try:
            parent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(parent.pid, signal.SIGUSR1)  # faulthandler: where every thread of the parent is
            time.sleep(1.0)
            parent.kill()
            raise AssertionError(
                f"the parent did not end after {signal.Signals(how).name}:\n{parent.stderr.read()}"
            ) from None
        assert _gone_within(workers, 10), f"{job} workers still running after {signal.Signals(how).name}"
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
