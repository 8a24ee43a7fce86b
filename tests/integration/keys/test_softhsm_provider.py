"""The PKCS#11 provider against a real SoftHSM2 token created in a temp directory.

Needs the Debian packages softhsm2 (softhsm2-util, /usr/lib/softhsm/libsofthsm2.so); fails, not
skips, when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from keys import (
    KeyProviderUnavailableError,
    KeysConfig,
    Pkcs11Provider,
    SealedModelError,
    Secret,
    build_provider,
    open_model,
    rotate,
    seal_model,
    verify_model,
)

pytestmark = pytest.mark.integration
MODULE = "/usr/lib/softhsm/libsofthsm2.so"
LABEL = "strongroom-test"
PIN = "4321-user"


@pytest.fixture(scope="module")
def token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    util = shutil.which("softhsm2-util")
    assert util and Path(MODULE).exists(), "SoftHSM2 missing: apt-get install -y softhsm2"
    root = tmp_path_factory.mktemp("softhsm")
    (root / "tokens").mkdir()
    conf = root / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    previous = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    subprocess.run(
        [util, "--init-token", "--free", "--label", LABEL, "--so-pin", "so-1234", "--pin", PIN],
        check=True, capture_output=True,
    )  # fmt: skip
    yield LABEL
    if previous is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = previous


@pytest.fixture
def hsm(token: str) -> Iterator[Pkcs11Provider]:
    provider = Pkcs11Provider.connect(MODULE, token, Secret(PIN), "k" + uuid.uuid4().hex[:8])
    provider.initialize()
    yield provider
    provider.close()


def test_seal_open_rotate_end_to_end(tmp_path: Path, hsm: Pkcs11Provider) -> None:
    weights = os.urandom(5000)
    seal_model({"model.safetensors": weights, "config.json": b"{}"}, tmp_path / "m", "m", hsm, chunk_size=512)
    stale = tmp_path / "stale"
    shutil.copytree(tmp_path / "m", stale)
    with open_model(tmp_path / "m", hsm, audit=None, process="t") as source:
        assert bytes(source.read("model.safetensors")) == weights
    report = rotate(hsm, [tmp_path / "m"])
    assert report.new_key.version == 2 and [r.version for r in report.retired] == [1]
    assert verify_model(tmp_path / "m", hsm).key.version == 2
    with pytest.raises(SealedModelError, match="retired"):
        open_model(stale, hsm, audit=None, process="t")
    assert [(v.ref.version, v.status.value) for v in hsm.versions()] == [(1, "retired"), (2, "current")]
    assert len(bytes.fromhex(hsm.versions()[1].signing_public_key)) == 32


def test_tampered_wrapped_key_is_wrong_key(tmp_path: Path, hsm: Pkcs11Provider) -> None:
    wrapped = hsm.wrap(b"d" * 32)
    assert hsm.unwrap(wrapped.blob, wrapped.ref.key_id, 1) == b"d" * 32
    forged = bytearray(wrapped.blob)
    forged[-1] ^= 1
    with pytest.raises(Exception, match="does not unwrap"):
        hsm.unwrap(bytes(forged), wrapped.ref.key_id, 1)


def test_build_provider_from_config(token: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KEYS_HSM_PIN", PIN)
    config = KeysConfig(
        provider="pkcs11", pkcs11_token_label=token, pkcs11_pin_env="KEYS_HSM_PIN", pkcs11_key_id="cfgkey"
    )
    provider = build_provider(config, tmp_path)
    assert isinstance(provider, Pkcs11Provider) and "4321" not in repr(provider)
    try:
        provider.initialize()
        assert provider.current().key_id == "cfgkey"
    finally:
        provider.close()


def test_hsm_unavailable_is_a_clear_error(token: str, tmp_path: Path) -> None:
    with pytest.raises(KeyProviderUnavailableError, match="cannot load PKCS#11 module"):
        Pkcs11Provider.connect(str(tmp_path / "missing.so"), token, Secret(PIN), "k")
    with pytest.raises(KeyProviderUnavailableError, match="no token labelled"):
        Pkcs11Provider.connect(MODULE, "no-such-token", Secret(PIN), "k")
    with pytest.raises(KeyProviderUnavailableError, match="PIN rejected"):
        Pkcs11Provider.connect(MODULE, token, Secret("wrong-pin"), "k")
