"""The supervisor: cnnengine-serve's own process. It runs the server (cnnengine.serving.worker) as a
child, restarts it when it dies, says so in its log (the child publishes the count as the metric
cnnengine_server_restarts), and stops it on SIGTERM or SIGINT however it was started (a shell's `&`
starts it with SIGINT ignored; both are handled here), during start-up too, then exits 0. It exits
non-zero only when it cannot serve at all: the first start fails (a bad model, a port in use), or
--restart-limit restarts in a row fail to become ready."""
from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time

LOG = logging.getLogger("cnnengine.serve")
STOP_GRACE_S = 10.0
RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 4.0)


class Supervisor:
    def __init__(self, argv: list[str], restart_limit: int):
        self.argv = argv
        self.restart_limit = restart_limit
        self.stopping = False
        self.child: subprocess.Popen | None = None

    def _on_signal(self, signum, _frame) -> None:
        if not self.stopping:
            LOG.info("%s: stopping", signal.Signals(signum).name)
        self.stopping = True

    def _start(self, restarts: int) -> tuple[subprocess.Popen, int]:
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "cnnengine.serving.worker", *self.argv,
               "--ready-fd", str(write_fd), "--restarts", str(restarts)]
        # This process handles both signals, so the child starts with their default dispositions
        # (exec resets handled signals); its own session keeps a terminal's Ctrl-C to this process,
        # which stops the child in order.
        child = subprocess.Popen(cmd, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        return child, read_fd

    def _wait_ready(self, child: subprocess.Popen, read_fd: int) -> bool:
        """True once the child says it is ready; False if it exits first or a stop is requested."""
        try:
            while not self.stopping:
                readable, _, _ = select.select([read_fd], [], [], 0.2)
                if readable:
                    return os.read(read_fd, 64).startswith(b"ready")
                if child.poll() is not None:
                    return False
            return False
        finally:
            os.close(read_fd)

    def _stop_child(self) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            LOG.warning("the server process did not stop within %.0f s; killing it", STOP_GRACE_S)
            child.kill()
            child.wait()

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        restarts, failed_in_a_row, ever_ready = 0, 0, False
        try:
            while not self.stopping:
                self.child, read_fd = self._start(restarts)
                if self._wait_ready(self.child, read_fd):
                    failed_in_a_row = 0
                    ever_ready = True
                    while not self.stopping and self.child.poll() is None:
                        time.sleep(0.1)
                if self.stopping:
                    break
                code = self.child.wait()
                how = f"signal {_signal_name(-code)}" if code < 0 else f"status {code}"
                if not ever_ready:
                    # Nothing was ever served: a bad model, file or port; the child said why.
                    LOG.error("the server could not start (%s)", how)
                    return 1
                failed_in_a_row += 1
                if failed_in_a_row > self.restart_limit:
                    LOG.error("the server process exited (%s) and %d restarts in a row failed; giving up",
                              how, self.restart_limit)
                    return 1
                restarts += 1
                LOG.error("the server process (pid %d) exited (%s); restarting it (restart %d)",
                          self.child.pid, how, restarts)
                time.sleep(RESTART_BACKOFF_S[min(failed_in_a_row, len(RESTART_BACKOFF_S)) - 1])
        finally:
            self._stop_child()
        LOG.info("stopped")
        return 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name
        return str(number)
