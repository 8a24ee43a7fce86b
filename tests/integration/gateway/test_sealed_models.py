"""A tampered sealed model stays out of service while the engine's other models keep serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from engine.demo import build_demo_files
from keys import KeyFileProvider, seal_model

pytestmark = pytest.mark.integration


def test_tampered_model_is_refused_and_the_other_serves(tmp_path: Path, serve: Any) -> None:
    data = tmp_path / "data"
    provider = KeyFileProvider.create(data / "keys" / "master.key")
    for name in ("demo-chat", "demo-base"):
        seal_model(build_demo_files(name), data / "models" / name, model_id=name, provider=provider)
    weights = data / "models" / "demo-base" / "model.safetensors.sealed"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))

    with serve(tmp_path) as gw:
        ready = httpx.get(f"{gw.base_url}/readyz").json()
        assert ready == {"ready": True, "models": 1, "engine": True, "audit": True, "redis": None}
        admin = OpenAI(base_url=gw.v1, api_key=gw.token("root", "admin"), max_retries=0)
        with pytest.raises(openai.APIStatusError) as err:
            admin.chat.completions.create(model="demo-base", messages=[{"role": "user", "content": "hi"}])
        assert err.value.status_code == 503
        done = admin.completions.create(model="demo-chat", prompt="hi", max_tokens=2)
        assert done.usage is not None and done.usage.completion_tokens == 2
        engines = httpx.get(
            f"{gw.base_url}/admin/engines", headers={"authorization": f"Bearer {gw.token('root', 'admin')}"}
        )
        failed = engines.json()["engines"][0]["failed_models"]
        assert "demo-base" in failed and "model.safetensors" in failed["demo-base"]
        key_ops = [r["event"] for r in gw.audit_records() if r["event"]["event_type"] == "key_operation"]
        assert any(e.get("model") == "demo-chat" and e["decision"] == "allow" for e in key_ops)
        # The data key of the tampered model was unwrapped (and audited); its chunks then failed to open.
        assert any(e.get("model") == "demo-base" for e in key_ops)


def test_plaintext_model_is_refused_when_sealing_is_required(tmp_path: Path, serve: Any) -> None:
    from engine.demo import write_demo_model

    data = tmp_path / "data"
    KeyFileProvider.create(data / "keys" / "master.key")
    provider = KeyFileProvider.load(data / "keys" / "master.key")
    seal_model(
        build_demo_files("demo-chat"), data / "models" / "demo-chat", model_id="demo-chat", provider=provider
    )
    write_demo_model("demo-base", data / "models" / "demo-base")
    with serve(tmp_path) as gw:
        assert httpx.get(f"{gw.base_url}/readyz").json()["models"] == 1
        engines = httpx.get(
            f"{gw.base_url}/admin/engines", headers={"authorization": f"Bearer {gw.token('root', 'admin')}"}
        )
        assert "plaintext" in engines.json()["engines"][0]["failed_models"]["demo-base"].lower()
