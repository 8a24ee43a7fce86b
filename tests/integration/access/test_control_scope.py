"""Control-plane permissions reach only the domain they are held in (issue 18, finding 2).

A real ``strongroom serve`` (stub engine), real tokens from its dev issuer, real policy store and
audit log. The matrix runs every caller against every admin and audit endpoint in the domains
``*``, ``retail`` and ``wholesale``; the expected status follows from one rule (see
``policies.control_scope``): a caller acts in its token's tenant, or in ``*`` without one, and a
control permission held there reaches that domain only (``*``: all of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.auth.dev_issuer import DevIssuer

pytestmark = pytest.mark.integration

ALL, RETAIL, WHOLESALE = "*", "retail", "wholesale"
DOMAINS = (ALL, RETAIL, WHOLESALE)

# caller -> (token roles, token tenant, domain of admin:policy, domain of audit:read); None: nowhere.
# Audit rights come from roles this module grants, not from the default admin role's.
CALLERS: dict[str, tuple[tuple[str, ...], str | None, str | None, str | None]] = {
    "root": (("admin", "compliance", "reader", "content-reader"), None, ALL, ALL),
    "root-in-retail": (("admin", "compliance", "reader", "content-reader"), RETAIL, RETAIL, RETAIL),
    "retail-admin": (("tenant-admin",), RETAIL, RETAIL, None),
    "retail-admin-no-tenant": (("tenant-admin",), None, None, None),
    "wholesale-admin": (("tenant-admin",), WHOLESALE, None, None),
    "global-reader": (("reader",), None, None, ALL),
    "retail-reader": (("retail-reader",), RETAIL, None, RETAIL),
    "retail-reader-asks-wholesale": (("retail-reader",), WHOLESALE, None, None),
    "retail-compliance": (("retail-reader", "retail-content"), RETAIL, None, RETAIL),
    "nobody": ((), None, None, None),
    "nobody-in-retail": ((), RETAIL, None, None),
}


def _covers(scope: str | None, domain: str) -> bool:
    return scope == ALL or (scope is not None and scope == domain)


class Control:
    def __init__(self, gateway: Any) -> None:
        self.http = httpx.Client(base_url=gateway.base_url, timeout=30)
        issuer = DevIssuer.load_or_create(gateway.data_dir)
        self.tokens = {
            name: issuer.mint(name, roles, tenant=tenant) for name, (roles, tenant, _, _) in CALLERS.items()
        }
        self.seq_of: dict[str, int] = {}

    def call(self, caller: str, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.tokens[caller]}"}
        return self.http.request(method, path, headers=headers, **kw)


@pytest.fixture(scope="module")
def control(stub_gateway: Any) -> Iterator[Control]:
    c = Control(stub_gateway)
    setup = [
        {"role": "tenant-admin", "pattern": "*", "action": "admin:policy", "domain": RETAIL},
        {"role": "reader", "pattern": "*", "action": "audit:read", "domain": ALL},
        {"role": "retail-reader", "pattern": "*", "action": "audit:read", "domain": RETAIL},
        {"role": "retail-content", "pattern": "*", "action": "audit:content", "domain": RETAIL},
        {"role": "content-reader", "pattern": "*", "action": "audit:content", "domain": ALL},
        {"role": "shopper", "pattern": "*", "action": "chat", "domain": ALL},
    ]
    for grant in setup:
        assert c.call("root", "POST", "/admin/grants", json=grant).status_code == 201
    # One inference record per tenant, so each tenant has records of its own to read (or not).
    issuer = DevIssuer.load_or_create(stub_gateway.data_dir)
    for tenant in (RETAIL, WHOLESALE):
        token = issuer.mint(f"shopper-{tenant}", ["shopper"], tenant=tenant)
        r = c.http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {token}"},
            json={"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert r.status_code == 200, r.text
        page = c.call("root", "GET", "/audit/records", params={"tenant": tenant, "event_type": "inference"})
        c.seq_of[tenant] = page.json()["records"][0]["seq"]
    yield c
    c.http.close()


def _role(caller: str, domain: str) -> str:
    return f"made-by-{caller}-in-{'all' if domain == ALL else domain}"


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("caller", CALLERS)
def test_admin_writes_stay_in_the_callers_domain(control: Control, caller: str, domain: str) -> None:
    allowed = _covers(CALLERS[caller][2], domain)
    grant = {"role": _role(caller, domain), "pattern": "*", "action": "admin:policy", "domain": domain}
    assert control.call(caller, "POST", "/admin/grants", json=grant).status_code == (201 if allowed else 403)
    # Assigning oneself the global admin role in the domain: the escalation of the report. Only a
    # caller who already holds every right of `admin` there may (no one hands out what it lacks).
    mine = {"user": caller, "role": "admin", "domain": domain}
    may_assign = allowed and "admin" in CALLERS[caller][0]
    assert control.call(caller, "POST", "/admin/assignments", json=mine).status_code == (
        201 if may_assign else 403
    )
    if allowed:
        if may_assign:
            removed = control.call(caller, "POST", "/admin/assignments/remove", json=mine)
            assert removed.status_code == 200
        assert control.call(caller, "POST", "/admin/grants/remove", json=grant).status_code == 200
    else:  # removing someone else's rule in a domain out of reach is refused too
        theirs = {"role": "tenant-admin", "pattern": "*", "action": "admin:policy", "domain": RETAIL}
        if not _covers(CALLERS[caller][2], RETAIL):
            assert control.call(caller, "POST", "/admin/grants/remove", json=theirs).status_code == 403


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("caller", CALLERS)
def test_admin_reads_stay_in_the_callers_domain(control: Control, caller: str, domain: str) -> None:
    allowed = _covers(CALLERS[caller][2], domain)
    expect = 200 if allowed else 403
    r = control.call(caller, "GET", "/admin/permissions", params={"role": "tenant-admin", "tenant": domain})
    assert r.status_code == expect
    check = {"roles": ["analyst"], "action": "chat", "model": "demo-chat", "tenant": domain}
    assert control.call(caller, "POST", "/admin/check", json=check).status_code == expect


@pytest.mark.parametrize("caller", CALLERS)
def test_policy_and_engines_show_only_what_the_scope_covers(control: Control, caller: str) -> None:
    scope = CALLERS[caller][2]
    r = control.call(caller, "GET", "/admin/policy")
    assert r.status_code == (403 if scope is None else 200)
    if scope is not None:
        rules = r.json()["grants"] + r.json()["assignments"]
        domains = {rule["domain"] for rule in rules}
        assert domains == ({ALL, RETAIL} if scope == ALL else {RETAIL}), domains
    assert control.call(caller, "GET", "/admin/engines").status_code == (200 if scope == ALL else 403)


@pytest.mark.parametrize("caller", CALLERS)
def test_audit_reads_stay_in_the_callers_domain(control: Control, caller: str) -> None:
    scope = CALLERS[caller][3]
    for tenant in (RETAIL, WHOLESALE):
        expect = 200 if _covers(scope, tenant) else 403
        for path in ("/audit/records", "/audit/aggregates"):
            assert control.call(caller, "GET", path, params={"tenant": tenant}).status_code == expect, path
        seq = control.seq_of[tenant]
        assert control.call(caller, "GET", f"/audit/records/{seq}").status_code == expect
    # Without a tenant filter: everything for a reader of '*', the caller's tenant otherwise.
    listing = control.call(caller, "GET", "/audit/records", params={"limit": "1000"})
    assert listing.status_code == (403 if scope is None else 200)
    if scope is not None:
        tenants = {rec["event"].get("tenant", "") for rec in listing.json()["records"]}
        assert tenants == ({"", RETAIL, WHOLESALE} if scope == ALL else {RETAIL}), tenants
    # The whole chain spans every tenant: export and verify are for readers of '*' only.
    for path in ("/audit/export", "/audit/verify"):
        assert control.call(caller, "GET", path).status_code == (200 if scope == ALL else 403), path
    # A record that does not exist reads, to a tenant-scoped reader, like one of another tenant.
    missing = control.call(caller, "GET", "/audit/records/999999")
    assert missing.status_code == {ALL: 404, None: 403}.get(scope, 403)


@pytest.mark.parametrize("caller", ["root", "retail-compliance", "retail-reader", "root-in-retail", "nobody"])
def test_content_reaches_only_the_callers_domain(control: Control, caller: str) -> None:
    content_scope = {"root": ALL, "retail-compliance": RETAIL, "root-in-retail": RETAIL}.get(caller)
    for tenant in (RETAIL, WHOLESALE):
        path = f"/audit/records/{control.seq_of[tenant]}/content"
        # Past authorization the answer is 404: the default audit mode keeps no content.
        expect = 404 if _covers(content_scope, tenant) else 403
        assert control.call(caller, "GET", path).status_code == expect, (tenant, path)
        match = control.call(caller, "POST", f"{path}/match", json={"text": "hi"})
        assert match.status_code == expect, (tenant, path)


def test_the_reported_escalation_chain_is_closed(control: Control) -> None:
    """The report, step by step: each step that was 201/200 is now 403."""
    grant = {"role": "tenant-admin", "pattern": "*", "action": "admin:policy", "domain": ALL}
    assert control.call("retail-admin", "POST", "/admin/grants", json=grant).status_code == 403
    assign = {"user": "nobody", "role": "admin", "domain": ALL}
    assert control.call("retail-admin", "POST", "/admin/assignments", json=assign).status_code == 403
    assert control.call("nobody", "GET", "/admin/policy").status_code == 403
    assert control.call("nobody", "GET", "/audit/records").status_code == 403
    wholesale = control.call("retail-reader", "GET", "/audit/records", params={"tenant": WHOLESALE})
    assert wholesale.status_code == 403
    # Each refusal is on the record, with the reason that says which domain was out of reach.
    denials = control.call(
        "root", "GET", "/audit/records", params={"event_type": "authorization_denial", "limit": "1000"}
    ).json()["records"]
    reasons = {(d["event"]["subject"], d["event"]["reason"]) for d in denials}
    assert ("retail-admin", "admin:policy not held in domain '*'") in reasons
    assert ("retail-reader", "audit:read not held in domain 'wholesale'") in reasons


def test_no_one_hands_out_control_rights_it_lacks(control: Control) -> None:
    """Separation of duties inside a tenant: a tenant's administrator could assign itself the
    default `admin` role there (and with it admin:keys and audit:read), and a global administrator
    could grant itself audit:content. A caller now hands out only control rights it holds."""
    for body in (
        {"user": "retail-admin", "role": "admin", "domain": RETAIL},
        {"user": "retail-admin", "role": "compliance", "domain": RETAIL},
        {"user": "retail-admin", "role": "retail-reader", "domain": RETAIL},
    ):
        assert control.call("retail-admin", "POST", "/admin/assignments", json=body).status_code == 403, body
    content = {"role": "tenant-admin", "pattern": "*", "action": "audit:content", "domain": RETAIL}
    assert control.call("retail-admin", "POST", "/admin/grants", json=content).status_code == 403
    # Model grants stay an administrator's to give, and so does a right it holds itself.
    model = {"role": "tenant-admin", "pattern": "demo-chat", "action": "chat", "domain": RETAIL}
    assert control.call("retail-admin", "POST", "/admin/grants", json=model).status_code == 201
    assert control.call("retail-admin", "POST", "/admin/grants/remove", json=model).status_code == 200
    # A holder of audit:content (root has `compliance`) may grant it.
    assert control.call("root", "POST", "/admin/grants", json=content).status_code == 201
    assert control.call("root", "POST", "/admin/grants/remove", json=content).status_code == 200
    denials = control.call(
        "root",
        "GET",
        "/audit/records",
        params={"event_type": "authorization_denial", "subject": "retail-admin", "limit": "500"},
    )
    reasons = [r["event"]["reason"] for r in denials.json()["records"]]
    assert any("would hand out permissions not held: audit:content" in r for r in reasons), reasons
