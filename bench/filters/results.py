"""Provenance for benchmark result files: command, commit, machine, date."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def git_commit() -> str:
    """Read HEAD from the .git folder (no git command runs)."""
    git = ROOT / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            path = git / ref
            if path.exists():
                return path.read_text().strip()
            for line in (git / "packed-refs").read_text().splitlines():
                if line.endswith(ref):
                    return line.split()[0]
        return head
    except OSError:
        return "unknown"


def provenance(module: str) -> dict[str, Any]:
    return {
        "command": " ".join([".venv/bin/python", "-m", module, *sys.argv[1:]]),
        "git_commit": git_commit(),
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}".strip(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
