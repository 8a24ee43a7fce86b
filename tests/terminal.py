"""Run a command on a pseudo-terminal (``script``), as an operator would: progress bars are drawn."""

from __future__ import annotations

import shlex
import subprocess


def run_on_terminal(
    argv: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``argv`` under ``script``: stdout holds what the terminal showed (stderr's bar included)."""
    return subprocess.run(
        ["script", "-qec", shlex.join(argv), "/dev/null"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
