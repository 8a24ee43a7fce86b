"""A tampered sealed model stays out of service while the engine's other models keep serving."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from engine.loading.demo import build_demo_files
from keys import KeyFileProvider, SealRegistry, seal_model

pytestmark = pytest.mark.integration

TWO_MODELS = {
    "STRONGROOM_ENGINE__MODELS": (
        '[{name = "demo-chat", path = "models/demo-chat"}, {name = "demo-base", path = "models/demo-base"}]'
    )
}
"""The two generators only: these tests count what serves (demo-embed would serve beside them)."""


def test_tampered_model_is_refused_and_the_other_serves(tmp_path: Path, serve: Any) -> None:
    data = tmp_path / "data"
    provider = KeyFileProvider.create(data / "keys" / "master.key")
    registry = SealRegistry(data / "keys" / "sealings.json", provider)
    for name in ("demo-chat", "demo-base"):
        seal_model(
            build_demo_files(name),
            data / "models" / name,
            model_id=name,
            provider=provider,
            registry=registry,
        )
    weights = data / "models" / "demo-base" / "model.safetensors.sealed"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))

    with serve(tmp_path, extra_env=TWO_MODELS) as gw:
        ready = httpx.get(f"{gw.base_url}/readyz").json()
        assert ready == {"ready": True, "models": 1, "engine": True, "audit": True, "redis": None}
        admin = OpenAI(base_url=gw.v1, api_key=gw.token("root", "admin"), max_retries=0)
        with pytest.raises(openai.APIStatusError) as err:
            admin.chat.completions.create(model="demo-base", messages=[{"role": "user", "content": "hi"}])
        assert err.value.status_code == 503
        done = admin.completions.with_raw_response.create(model="demo-chat", prompt="hi", max_tokens=2)
        assert done.parse().usage.completion_tokens == 2  # type: ignore[union-attr]
        # Every inference record names the exact sealing served (pen-test finding 6: it was empty).
        digest = hashlib.sha256((data / "models" / "demo-chat" / "manifest.json").read_bytes()).hexdigest()
        served = gw.audit_for(done.headers["x-request-id"])
        assert served and all(r["event"]["model_manifest"] == digest for r in served), served
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
    from engine.loading.demo import write_demo_model

    data = tmp_path / "data"
    KeyFileProvider.create(data / "keys" / "master.key")
    provider = KeyFileProvider.load(data / "keys" / "master.key")
    seal_model(
        build_demo_files("demo-chat"),
        data / "models" / "demo-chat",
        model_id="demo-chat",
        provider=provider,
        registry=SealRegistry(data / "keys" / "sealings.json", provider),
    )
    write_demo_model("demo-base", data / "models" / "demo-base")
    with serve(tmp_path, extra_env=TWO_MODELS) as gw:
        assert httpx.get(f"{gw.base_url}/readyz").json()["models"] == 1
        engines = httpx.get(
            f"{gw.base_url}/admin/engines", headers={"authorization": f"Bearer {gw.token('root', 'admin')}"}
        )
        assert "plaintext" in engines.json()["engines"][0]["failed_models"]["demo-base"].lower()


def test_swapped_and_rolled_back_sealings_are_refused(tmp_path: Path, serve: Any) -> None:
    """Pen-test finding 6: swapping two models' sealed directories served one model's weights under
    the other's name, and an older sealing of a model loaded after a newer one."""
    import shutil
    import time

    data = tmp_path / "data"
    provider = KeyFileProvider.create(data / "keys" / "master.key")
    registry = SealRegistry(data / "keys" / "sealings.json", provider)
    models = data / "models"
    # demo-chat's directory holds demo-base's sealing; demo-base's holds its own first sealing,
    # superseded by a second one since.
    seal_model(
        build_demo_files("demo-base"),
        models / "demo-chat",
        model_id="demo-base",
        provider=provider,
        registry=registry,
    )
    seal_model(
        build_demo_files("demo-base"),
        models / "demo-base",
        model_id="demo-base",
        provider=provider,
        registry=registry,
    )
    seal_model(
        build_demo_files("demo-base"),
        tmp_path / "newer",
        model_id="demo-base",
        provider=provider,
        registry=registry,
    )
    shutil.rmtree(models / "demo-base")
    shutil.copytree(models / "demo-chat", models / "demo-base")  # now the first of three demo-base sealings
    with serve(tmp_path, extra_env=TWO_MODELS, wait_ready=False) as gw:
        admin = {"authorization": f"Bearer {gw.token('root', 'admin')}"}
        deadline = time.monotonic() + 120
        failed: dict[str, str] = {}
        while len(failed) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            engines = httpx.get(f"{gw.base_url}/admin/engines", headers=admin).json()["engines"]
            failed = engines[0]["failed_models"] if engines else {}
        assert "sealed as 'demo-base', configured to serve 'demo-chat'" in failed["demo-chat"]
        assert "v1 of 'demo-base' is older than the newest registered v3" in failed["demo-base"]
        assert httpx.get(f"{gw.base_url}/readyz").status_code == 503


def test_tensor_parallel_ranks_each_open_the_sealed_model(tmp_path: Path, serve: Any) -> None:
    """One host, tensor parallel over two ranks, sealed weights: rank 0 spawns rank 1, which
    unwraps the data key through the key provider itself (it is never handed rank 0's); both
    unwraps land in the gateway's audit log, each naming its own process."""
    import json

    data = tmp_path / "data"
    provider = KeyFileProvider.create(data / "keys" / "master.key")
    registry = SealRegistry(data / "keys" / "sealings.json", provider)
    seal_model(
        build_demo_files("demo-chat"),
        data / "models" / "demo-chat",
        model_id="demo-chat",
        provider=provider,
        registry=registry,
    )
    env = {
        "STRONGROOM_ENGINE__MODELS": '[{name = "demo-chat", path = "models/demo-chat"}]',
        "STRONGROOM_ENGINE__TENSOR_PARALLEL_SIZE": "2",
    }
    with serve(tmp_path, extra_env=env) as gw:
        admin = OpenAI(base_url=gw.v1, api_key=gw.token("root", "admin"), max_retries=0)
        done = admin.completions.create(model="demo-chat", prompt="hi", max_tokens=3, temperature=0)
        assert done.usage is not None and done.usage.completion_tokens == 3
        unwraps = [
            json.loads(r["event"]["detail"])
            for r in gw.audit_records()
            if r["event"]["event_type"] == "key_operation" and r["event"]["decision"] == "allow"
        ]
    assert [(u["operation"], u["model"]) for u in unwraps] == [("unwrap", "demo-chat")] * 2
    assert len({u["process"] for u in unwraps}) == 2, unwraps
