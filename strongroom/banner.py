"""The start-up banner of ``serve``: commands that work when pasted into a new shell.

So every command names the absolute path of this installation's ``strongroom`` (a venv is
rarely on PATH), the ``--config`` the gateway was started with, a model it actually serves,
and a dev token only when the dev issuer is on. The Python example runs only where ``openai``
is installed, so it is shown only then.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

from strongroom.config import Settings

__all__ = ["banner"]


def _strongroom_command() -> str:
    script = Path(sys.executable).parent / "strongroom"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m strongroom"


def banner(
    settings: Settings, host: str, port: int, *, scheme: str = "http", config_path: str | None = None
) -> str:
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104 - a bind address, shown
    base = f"{scheme}://{shown_host}:{port}/v1"
    config = f" --config {shlex.quote(str(Path(config_path).resolve()))}" if config_path else ""

    def command(sub: str) -> str:
        return f"{_strongroom_command()} {sub}{config}"

    lines = [
        "",
        f"Strongroom gateway listening on {scheme}://{host}:{port}   (data in {settings.data_path}/)",
    ]
    if settings.grpc.enabled:
        tls = "TLS" if scheme == "https" else "plaintext"
        lines.append(
            f"gRPC API ({tls}) on {host}:{settings.grpc.port}   (service: gateway/grpc_api/inference.proto)"
        )
    lines.append("")
    if not Path(settings.data_dir).expanduser().is_absolute():
        lines.append(f"  cd {shlex.quote(str(Path.cwd()))}    # data_dir is relative to this directory")
    if settings.auth.dev_issuer:
        lines.append(f"  export TOKEN=$({command('token')} --sub alice --role analyst)")
    else:
        lines.append("  export TOKEN=...   # a token from your identity provider ([[auth.issuers]])")
    served = [m.name for m in settings.engine.models] if not settings.server.engine_urls else []
    chat = [m.name for m in settings.engine.models if m.kind != "embedding"]
    model = chat[0] if served and chat else "MODEL"
    insecure = " -k" if scheme == "https" else ""
    lines += [
        "",
        f'  curl -s{insecure} {base}/chat/completions -H "Authorization: Bearer $TOKEN" \\',
        "       -H 'content-type: application/json' \\",
        f'       -d \'{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}], "max_tokens": 16}}\'',
    ]
    if importlib.util.find_spec("openai") is not None:
        lines += [
            "",
            f'  {shlex.quote(sys.executable)} -c "from openai import OpenAI; import os; '
            f"c = OpenAI(base_url='{base}', api_key=os.environ['TOKEN']); \\",
            f"print(c.chat.completions.create(model='{model}', messages=[{{'role': 'user', 'content': 'Hello'}}], "
            'max_tokens=16).choices[0].message.content)"',
        ]
    lines += ["", f"  {command('audit tail')}        # every request, allowed or denied", ""]
    if served:
        lines.append(f"Models served: {', '.join(served)}.")
    else:
        lines.append(f"Models: those of the engines in server.engine_urls (curl {base}/models lists them).")
    if any(name in ("demo-chat", "demo-base", "demo-embed") for name in served):
        lines.append(
            "The demo models produce noise: they are tiny random-weight models. Point [engine] models at a\n"
            "Hugging Face directory to serve a real one (see README)."
        )
    return "\n".join(lines) + "\n"
