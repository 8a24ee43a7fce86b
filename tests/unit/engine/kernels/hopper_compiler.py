"""Compiles recorded kernel launches for an H200 (CUDA sm_90) on a machine without a GPU.

Under ``TRITON_INTERPRET=1`` every ``@triton.jit`` function, helpers included, is an
interpreted one, which Triton's code generator cannot call; so the compile runs in child
processes that import ``engine.kernels`` without the interpreter, where the kernels are the
``JITFunction``s a GPU runs. A child also keeps a crash of the compiler out of pytest. Each child
reads launches as JSON on stdin and writes one JSON line per launch: its index and the compile
error, or null. Run as a script, this module is that child.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.unit.engine.kernels.kernel_launch import KernelLaunch

__all__ = ["compile_for_hopper"]

_ROOT = Path(__file__).resolve().parents[4]
HOPPER = ("cuda", 90, 32)
"""Triton's GPUTarget of an H200: backend, compute capability, warp size."""


def compile_for_hopper(launches: list[KernelLaunch], workers: int = 2) -> dict[KernelLaunch, str | None]:
    """{launch: None, or the compiler's error}, compiled in ``workers`` children. Triton's
    on-disk cache answers what compiled before: its key covers the kernel's source and every
    jit function it calls, and a failed compile is never cached."""
    specs = [
        {
            "module": launch.module,
            "name": launch.name,
            "signature": dict(launch.signature),
            "constexprs": dict(launch.constexprs),
            "attrs": dict(launch.attrs),
            "options": dict(launch.options),
        }
        for launch in launches
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    shares = [list(range(w, len(launches), workers)) for w in range(workers)]
    errors: dict[int, str | None] = {}
    with contextlib.ExitStack() as stack:
        children = []
        for share in filter(None, shares):
            # stderr to a file: a child's warnings or crash dump never fill a pipe nobody reads yet.
            stderr = stack.enter_context(tempfile.TemporaryFile("w+"))
            child = stack.enter_context(
                subprocess.Popen(
                    [sys.executable, __file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=env,
                    cwd=_ROOT,
                    text=True,
                )
            )
            children.append((share, child, stderr))
        for share, child, _ in children:
            assert child.stdin is not None
            child.stdin.write(json.dumps([specs[i] for i in share]))
            child.stdin.close()
        for share, child, stderr in children:
            assert child.stdout is not None
            for line in child.stdout:
                result = json.loads(line)
                errors[share[result["index"]]] = result["error"]
            child.wait()
            stderr.seek(0)
            tail = stderr.read()[-4000:]
            for i in share:  # a child that died mid-way leaves its remaining launches unanswered
                errors.setdefault(i, f"the compiler process exited with {child.returncode}:\n{tail}")
    return {launch: errors[i] for i, launch in enumerate(launches)}


def _error(exc: BaseException) -> str:
    # The compiler's message and every cause under it (the CompilationError shows the source line,
    # its cause says what is wrong, e.g. "Return type mismatch").
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _main() -> None:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend, CUDAOptions
    from triton.compiler import ASTSource

    # The answers go to the parent's pipe; anything else written to stdout (ptxas prints a
    # rejected assembly's source there) goes to stderr, so the answers stay one JSON per line.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    options = set(CUDAOptions.__dataclass_fields__)
    for index, spec in enumerate(json.load(sys.stdin)):
        error = None
        try:
            unknown = set(spec["options"]) - options
            if unknown:  # as JITFunction.run refuses them
                raise KeyError(
                    f"keyword arguments that are neither parameters nor options: {sorted(unknown)}"
                )
            kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
            attrs = {
                (kernel.arg_names.index(k),): CUDABackend.parse_attr(v) for k, v in spec["attrs"].items()
            }
            source = ASTSource(kernel, spec["signature"], spec["constexprs"], attrs)
            triton.compile(source, target=GPUTarget(*HOPPER), options=spec["options"])
        except Exception as exc:
            error = _error(exc)
        print(json.dumps({"index": index, "error": error}), file=answers, flush=True)


if __name__ == "__main__":
    _main()
