"""Where a benchmark result came from: command, commit, machine, date."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    """HEAD (with ``-dirty`` for local changes), or $GIT_COMMIT where the tree has no .git (device runs)."""
    if commit := os.environ.get("GIT_COMMIT"):
        return commit
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=_REPO, capture_output=True, text=True, timeout=30
    )
    return commit + ("-dirty" if dirty.stdout.strip() else "")


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def command_line(argv: list[str]) -> str:
    """The command as typed: ``python -m bench.x ...`` for a module run, ``strongroom bench ...`` otherwise."""
    if not argv:
        return ""
    program = Path(argv[0])
    head = (
        ["python", "-m", f"{program.parent.name}.{program.stem}"]
        if program.suffix == ".py"
        else [program.name]
    )
    return shlex.join([*head, *argv[1:]])


def provenance(argv: list[str], device: str) -> dict[str, Any]:
    return {
        "command": command_line(argv),
        "git_commit": git_commit(),
        "machine": machine(device),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
