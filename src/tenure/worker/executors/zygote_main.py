"""The zygote: a process that imported the App once and forks executors from itself.

An executor forked from it starts in a millisecond or two with every module
imported, and the App's module-level code runs once per zygote, not once per
executor. The zygote must be forked before the supervisor has any thread or
connection (a fork copies the forking thread only, and every descriptor): the
CLI forks it right after importing the App (:func:`fork_zygote`). A worker
started from Python, and one whose zygote died, start a fresh interpreter
instead (:func:`main`, with APP_PATH FD PARENT_PID) that imports the App.

The zygote stays single-threaded and holds only its control socket, so each
fork copies a quiet process. It dies with the supervisor (``PR_SET_PDEATHSIG``
on Linux; end of file on the control socket everywhere), and its executors die
with it (their own ``PR_SET_PDEATHSIG``): none outlives the supervisor. It
needs ``fork`` and unix sockets: POSIX, as the rest of tenure.

The control socket is a unix stream socketpair. To the zygote: one byte b"f"
carrying three descriptors (SCM_RIGHTS), an executor's ``runs`` and
``control`` pipes (read ends) and its ``out`` pipe (write end): fork an
executor on them. From the zygote, JSON
lines: ``{"ready": pid, "threads": [names]}`` or ``{"fatal": error}`` once,
then ``{"forked": pid}`` or ``{"failed": error}`` per request in their order,
and ``{"exited": pid, "code": returncode}`` (negative: the signal that killed
it) when an executor has died. Threads the App's import started are named in
"ready": executors forked have none of them (as with any server that forks
after loading the application).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from tenure.worker.executors.child_main import die_with_parent, run

if TYPE_CHECKING:
    from tenure.app import App

FORK = b"f"
PIPES = 3  # descriptors per request: an executor's runs, control and out pipes


@dataclass(frozen=True)
class ForkedZygote:
    """A zygote forked by the process that imported the App, not yet adopted
    by a process pool: its pid, and the supervisor's end of its control socket."""

    pid: int
    sock: socket.socket


def fork_zygote(app: App) -> ForkedZygote | None:
    """Fork the zygote from this process, which imported ``app``; None if this
    process has threads already (a thread's locks could be held in the copy):
    the pool then starts a fresh interpreter as its zygote."""
    if threading.active_count() > 1:
        return None
    parent = os.getpid()
    ours, theirs = socket.socketpair()
    sys.stdout.flush()  # else the zygote's executors would print it again
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            serve(theirs, app, parent)
        finally:
            os._exit(1)
    theirs.close()
    return ForkedZygote(pid, ours)


def serve(sock: socket.socket, app: App, parent: int) -> NoReturn:
    """Be the zygote for ``app`` on ``sock``, for the supervisor ``parent``."""
    die_with_parent(parent)
    for sig in (signal.SIGINT, signal.SIGTERM):  # the supervisor decides when executors stop
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDONLY)  # a handler reading stdin gets end of file
    os.dup2(null, 0)
    os.close(null)
    try:
        from tenure.backends.factory import from_url

        from_url(app.url)  # imports the backend's modules, once, for every executor
    except BaseException as exc:
        _send(sock, {"fatal": f"the zygote cannot prepare executors: {exc}"})
        os._exit(1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)  # a death wakes the poll below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    _send(sock, {"ready": os.getpid(), "threads": others})
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    poll.register(wake_r, select.POLLIN)
    while True:
        for fd, _ in poll.poll():
            if fd == wake_r:
                os.read(wake_r, 4096)
                _reap(sock)
                continue
            data, fds, _, _ = socket.recv_fds(sock, 1, PIPES)
            if data != FORK or len(fds) != PIPES:
                os._exit(0)  # the supervisor is gone (end of file), or is not ours
            try:
                pid = _fork(app, fds, closing=(sock.fileno(), wake_r, wake_w))
            except OSError as exc:  # out of processes or memory: the supervisor says so
                for unused in fds:
                    os.close(unused)
                _send(sock, {"failed": f"the zygote cannot fork: {exc}"})
            else:
                _send(sock, {"forked": pid})


def _fork(app: App, fds: list[int], closing: tuple[int, ...]) -> int:
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a handler's subprocesses reap as usual
            for fd in closing:
                os.close(fd)
            fd_runs, fd_control, fd_out = fds
            run(app, fd_runs, fd_control, fd_out, parent)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    return pid


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        sock.sendall(json.dumps(message).encode() + b"\n")
    except OSError:  # the supervisor is gone
        os._exit(0)


def main(argv: list[str]) -> NoReturn:
    """Be the zygote of a supervisor that started this interpreter for it."""
    app_path, fd, parent = argv[0], int(argv[1]), int(argv[2])
    die_with_parent(parent)
    sock = socket.socket(fileno=fd)
    try:
        from tenure.loader import load_app

        app = load_app(app_path)
    except BaseException as exc:
        _send(sock, {"fatal": f"the zygote cannot load {app_path}: {exc}"})
        os._exit(1)
    serve(sock, app, parent)
