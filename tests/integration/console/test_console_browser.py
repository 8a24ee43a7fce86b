"""The console in Debian's Chromium: IdP sign-in (code flow + PKCE), search, a record and its
content, chain verification, export (by time and by user) re-verified offline by the CLI, sign-out;
an administrator's grant, quota and key rotation with their effect; every view audited.

Set STRONGROOM_CONSOLE_SCREENSHOTS=<dir> to keep a PNG of each page (docs/console/ holds them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.integration.conftest import ServedGateway, free_port, served_gateway
from tests.integration.console.oidc_provider import OidcProvider, running_provider

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CLIENT_ID = "strongroom-console"
HIDDEN = 404  # a model the caller may not use is answered as unknown (and audited as a denial)
PAYLOAD = '<img src=x onerror=alert(1)><script>alert("xss")</script>'


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProvider]:
    provider = OidcProvider(
        client_id=CLIENT_ID,
        redirect_uri="",
        users={"officer.wang": ["bank-compliance"], "admin.zhao": ["bank-admins"]},
    )
    with running_provider(provider) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, idp: OidcProvider) -> Iterator[ServedGateway]:
    port = free_port()
    idp.redirect_uri = f"http://127.0.0.1:{port}/console/callback"
    issuers = (
        f'[{{issuer = "{idp.issuer}", audiences = ["{CLIENT_ID}"], jwks_url = "{idp.jwks_url}", '
        'algorithms = ["RS256"], roles_claim = "groups", '
        'role_mapping = {"bank-compliance" = "compliance", "bank-admins" = "admin"}}]'
    )
    env = {
        "STRONGROOM_AUTH__ISSUERS": issuers,
        "STRONGROOM_CONSOLE__OIDC_ISSUER": f'"{idp.issuer}"',
        "STRONGROOM_CONSOLE__OIDC_CLIENT_ID": CLIENT_ID,
        "STRONGROOM_CONSOLE__OIDC_REDIRECT_URL": idp.redirect_uri,
    }
    with served_gateway(tmp_path_factory.mktemp("console"), extra_env=env, port=port) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        # Root in a container has no user namespaces for Chromium's sandbox.
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def _chat(gateway: ServedGateway, token: str, text: str) -> int:
    response = httpx.post(
        f"{gateway.v1}/chat/completions",
        headers={"authorization": f"Bearer {token}"},
        json={"model": "demo-chat", "messages": [{"role": "user", "content": text}], "max_tokens": 4},
        timeout=60,
    )
    return response.status_code


def _verify_file(gateway: ServedGateway, bundle: Path, key: Path) -> subprocess.CompletedProcess[str]:
    """``strongroom audit verify --file`` in a process of its own: offline, the given key only."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "strongroom",
            "audit",
            "verify",
            "--file",
            str(bundle),
            "--public-key",
            str(key),
        ],
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _shot(page: Page, name: str) -> None:
    target = os.environ.get("STRONGROOM_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


def test_officer_signs_in_searches_reads_verifies_exports_and_signs_out(
    gateway: ServedGateway, idp: OidcProvider, browser: Browser, tmp_path: Path
) -> None:
    assert _chat(gateway, gateway.token("alice", "analyst"), "my card is 4111 1111 1111 1111") == 200
    assert _chat(gateway, gateway.token(PAYLOAD, "analyst"), "hello") == 200
    assert _chat(gateway, gateway.token("mallory"), "no role") == HIDDEN

    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    csp_violations: list[str] = []
    page.on(
        "console", lambda m: csp_violations.append(m.text) if "Content Security Policy" in m.text else None
    )

    page.goto(f"{gateway.base_url}/console/")
    expect(page).to_have_url(f"{gateway.base_url}/console/sign-in")
    _shot(page, "sign-in")
    page.get_by_test_id("sso").click()
    expect(page.locator("h1")).to_have_text("Bank IdP sign-in")
    page.get_by_role("button", name="officer.wang").click()
    expect(page).to_have_url(f"{gateway.base_url}/console/audit")
    expect(page.get_by_test_id("whoami")).to_have_text("officer.wang")
    # The IdP saw PKCE: the verifier arrived at its token endpoint, and no token rode in a URL.
    assert idp.token_calls[-1]["code_verifier"]
    cookies = {c["name"]: c for c in context.cookies()}
    session = cookies["strongroom_console"]
    assert session["httpOnly"] and session["sameSite"] == "Lax" and session["path"] == "/console"

    # Search by user through htmx: only alice's records, and the planted payload stays text.
    page.fill("input[name=subject]", "alice")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(f"{gateway.base_url}/console/audit?subject=alice")
    rows = page.get_by_test_id("results").locator("tbody tr")
    expect(rows.first).to_contain_text("alice")
    for text in rows.all_inner_texts():
        assert "alice" in text
    _shot(page, "search")
    page.get_by_test_id("lang-zh").click()
    expect(page.locator("h1")).to_have_text("审计检索")
    expect(page).to_have_url(f"{gateway.base_url}/console/audit?subject=alice")
    _shot(page, "search-zh")
    page.get_by_test_id("lang-en").click()
    expect(page.locator("h1")).to_have_text("Audit search")
    page.goto(f"{gateway.base_url}/console/audit?event_type=inference")
    expect(page.get_by_test_id("results")).to_contain_text(PAYLOAD)
    page.goto(f"{gateway.base_url}/console/audit?decision=deny")
    expect(page.get_by_test_id("results")).to_contain_text("mallory")

    # A record's detail page (content views are covered in tests/unit/gateway/console: the
    # gateway does not hand prompts to the audit log yet).
    page.goto(f"{gateway.base_url}/console/audit?subject=alice&event_type=inference")
    page.get_by_test_id("results").locator("tbody tr a").first.click()
    expect(page.get_by_test_id("record")).to_contain_text("payment_card")
    expect(page.get_by_test_id("record")).to_contain_text("/v1/chat/completions")
    _shot(page, "record")

    page.get_by_role("link", name="Charts").click()
    expect(page.get_by_test_id("chart")).to_have_count(4)
    expect(page.locator("svg rect").first).to_be_visible()
    _shot(page, "charts")

    page.goto(f"{gateway.base_url}/console/audit/verify")
    page.get_by_test_id("verify").click()
    expect(page.get_by_test_id("report")).to_contain_text("Intact")
    expect(page.get_by_test_id("checkpoint")).to_be_visible()
    _shot(page, "verify")

    page.goto(f"{gateway.base_url}/console/audit/export")
    _shot(page, "export")
    with page.expect_download() as bundle_download:
        page.get_by_test_id("export").click()
    bundle = tmp_path / "bundle.jsonl"
    bundle_download.value.save_as(bundle)
    with page.expect_download() as key_download:
        page.get_by_role("link", name="public key", exact=True).click()
    key = tmp_path / "audit-public-key.pem"
    key_download.value.save_as(key)
    verified = _verify_file(gateway, bundle, key)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # By user: only alice's records travel, and the CLI accepts the bundle offline too.
    page.get_by_test_id("export-user").fill("alice")
    with page.expect_download() as user_download:
        page.get_by_test_id("export").click()
    user_bundle = tmp_path / "alice.jsonl"
    user_download.value.save_as(user_bundle)
    lines = [json.loads(line) for line in user_bundle.read_text().splitlines()]
    assert {line["subject"] for line in lines if line["type"] == "record"} == {"alice"}
    verified = _verify_file(gateway, user_bundle, key)
    assert verified.returncode == 0 and verified.stdout.startswith("OK: "), verified.stdout + verified.stderr

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{gateway.base_url}/console/sign-in")
    page.goto(f"{gateway.base_url}/console/audit")
    expect(page).to_have_url(f"{gateway.base_url}/console/sign-in")

    # An administrator grants a new role a model in the matrix; the API follows at once (404 -> 200 -> 404).
    teller = gateway.token("teller.li", "teller")
    assert _chat(gateway, teller, "hello") == HIDDEN
    page.get_by_test_id("sso").click()
    page.get_by_role("button", name="admin.zhao").click()
    page.get_by_role("link", name="Administration").click()
    expect(page.get_by_test_id("engines")).to_contain_text("demo-chat")
    # The engine pool refreshes itself (htmx, every 5 s), and keeps doing so after each swap.
    for _ in range(2):
        with page.expect_response(
            lambda r: r.url.endswith("/console/admin/engines"), timeout=15000
        ) as polled:
            pass
        assert polled.value.status == 200
    expect(page.get_by_test_id("engines")).to_contain_text("demo-chat")
    page.get_by_test_id("new-role").fill("teller")
    page.get_by_test_id("new-model").select_option("demo-chat")
    page.get_by_test_id("grant").click()
    expect(page.get_by_test_id("notice")).to_contain_text("admin.zhao granted chat on demo-chat to teller")
    expect(page.get_by_test_id("cell-teller-demo-chat")).to_have_text("✓")
    _shot(page, "admin")
    assert _chat(gateway, teller, "hello") == 200

    # A quota for one user, set in the console, limits it on /v1 at once; removing it lifts it.
    page.get_by_test_id("quotas-link").click()
    page.get_by_test_id("quota-kind").select_option("user")
    page.get_by_test_id("quota-name").fill("teller.li")
    page.get_by_test_id("quota-requests_per_minute").fill("1")
    page.get_by_test_id("quota-set").click()
    expect(page.get_by_test_id("notice")).to_contain_text(
        "admin.zhao set quota: user teller.li in *: requests_per_minute=1"
    )
    _shot(page, "quotas")
    # Three requests within a minute span at most two fixed windows: one of them is over the limit.
    assert 429 in [_chat(gateway, teller, "hello") for _ in range(3)]
    page.get_by_test_id("quota-overrides").get_by_role("button", name="Remove").click()
    expect(page.get_by_test_id("notice")).to_contain_text("removed the quota override of user teller.li in *")
    assert _chat(gateway, teller, "hello") == 200

    # The master key rotated after typing its version; the keys page shows the new one.
    page.goto(f"{gateway.base_url}/console/admin/keys")
    expect(page.get_by_test_id("key-versions")).to_contain_text("current")
    page.get_by_test_id("rotate-link").click()
    current = page.get_by_test_id("current-version").inner_text()
    key_id, _, version = current.rpartition("/v")
    page.get_by_test_id("confirm").fill(current)
    _shot(page, "keys-rotate")
    page.get_by_test_id("rotate").click()
    rotated = f"{key_id}/v{int(version) + 1}"
    expect(page.get_by_test_id("notice")).to_contain_text(f"Now {rotated}")
    expect(page.get_by_test_id("key-versions").locator("tbody tr").last).to_contain_text("current")
    _shot(page, "keys")
    page.goto(f"{gateway.base_url}/console/admin")
    page.get_by_test_id("cell-teller-demo-chat").click()
    expect(page.get_by_test_id("notice")).to_contain_text("revoked chat on demo-chat")
    assert _chat(gateway, teller, "hello") == HIDDEN
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{gateway.base_url}/console/sign-in")
    assert dialogs == [] and csp_violations == []
    context.close()

    console_views = [
        r["event"]
        for r in gateway.audit_records(2000)
        if r["event"].get("subject") == "officer.wang"  # type: ignore[union-attr]
    ]
    details = [str(e.get("detail", "")) for e in console_views]  # type: ignore[union-attr]
    assert "console sign-in (oidc)" in details
    assert any(d.startswith("console record ") for d in details)
    assert any(d.startswith("console search") and "alice" in d for d in details)
    assert any(d == "console verify" for d in details)
    assert any(d.startswith("console export jsonl") for d in details)
    assert details[-1] == "console sign-out"
    changes = [
        r["event"] for r in gateway.audit_records(2000) if r["event"].get("event_type") == "admin_change"
    ]  # type: ignore[union-attr]
    assert [c.get("subject") for c in changes][-4:] == ["admin.zhao"] * 4  # type: ignore[union-attr]
    assert [str(c.get("detail")).split(":")[0] for c in changes][-3:-1] == [  # type: ignore[union-attr]
        "quota user teller.li in *",
        "quota user teller.li in *",
    ]
    key_ops = [
        r["event"] for r in gateway.audit_records(2000) if r["event"].get("event_type") == "key_operation"
    ]  # type: ignore[union-attr]
    rotation = [e for e in key_ops if '"operation":"rotate"' in str(e.get("detail"))]  # type: ignore[union-attr]
    assert [(e.get("subject"), e.get("client_app")) for e in rotation] == [("admin.zhao", "console")]  # type: ignore[union-attr]
    assert all(e["roles"] == ["compliance"] for e in console_views)  # type: ignore[index]
