"""A pre-imported parent that forks real ``strongroom`` processes on request (crash harness).

Importing the gateway costs ~1 s of CPU; the crash harness starts a gateway per iteration and
runs CLI commands beside it, so it forks them from this process instead of exec'ing Python.
Each child is an ordinary ``strongroom`` process from ``main()`` on: ``serve`` runs the real
gateway, ``audit tail`` the real command.

    stdin:  {"argv": ["serve"], "env": {...}, "log": "/path/child.log"}   one JSON line per child
    stdout: <pid>                                                         one line per child
A child that exits writes its exit code to ``<log>.rc``; a SIGKILLed one writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import traceback

import uvicorn  # noqa: F401

# What ``strongroom serve`` and the audit commands import before they do anything.
import gateway.app
import gateway.services  # noqa: F401
from strongroom.cli import main


def _child(request: dict[str, object]) -> None:
    """Never returns: whatever happens, the child ends here and never reads the parent's stdin."""
    code = 1
    log = str(request["log"])
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        main(list(request["argv"]), prog_name="strongroom")  # type: ignore[call-overload]
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError):  # whole or not at all: the harness polls for it
            with open(log + ".rc.tmp", "w") as f:
                f.write(str(code))
            os.replace(log + ".rc.tmp", log + ".rc")
        os._exit(code)


def serve_forever() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(pid, flush=True)


if __name__ == "__main__":
    serve_forever()
