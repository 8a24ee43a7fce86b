"""Sign-in (the IdP's authorization code flow with PKCE, or a dev-issuer token), and sign-out.

Cookies: the session id (HttpOnly, SameSite=Lax so the IdP's redirect back may carry the state
cookie, Secure under TLS, path /console); the sign-in state (same flags, path
/console/callback, 10 minutes); and, for the dev form before any session exists, a login-CSRF
value compared with the form's hidden field (double submit). Every sign-in, failed sign-in and
sign-out is an audit record.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.params import FromQuery, QueryParameter
from litestar.response import Redirect, Template

from common.audit_event import Decision, EventType
from common.principal import Principal
from gateway.auth.dev_issuer import DEV_ISSUER
from gateway.auth.errors import AuthenticationError
from gateway.console.console import SESSION_COOKIE, STATE_COOKIE, Console, check_csrf
from gateway.console.errors import NotSignedInError, PageNotFoundError
from gateway.console.language import text
from gateway.console.oidc_client import SignInError

__all__ = ["SIGN_IN_ROUTES"]

LOGIN_CSRF_COOKIE = "strongroom_console_login"
_STATE_TTL_S = 600


def _cookie(console: Console, key: str, value: str, *, path: str, max_age: int) -> Cookie:
    return Cookie(
        key=key,
        value=value,
        path=path,
        httponly=True,
        secure=console.secure_cookies,
        samesite="lax",
        max_age=max_age,
    )


def _cleared(console: Console, key: str, path: str) -> Cookie:
    return _cookie(console, key, "", path=path, max_age=0)


@get("/")
async def console_home(request: Request[Any, Any, Any]) -> Redirect:
    console = Console.of(request)
    signed_in = await console.sessions.get(request.cookies.get(SESSION_COOKIE)) is not None
    return Redirect("/console/audit" if signed_in else "/console/sign-in", status_code=303)


@get("/sign-in")
async def sign_in_page(request: Request[Any, Any, Any]) -> Template:
    console = Console.of(request)
    return _sign_in_page(console, problem="", status=200)


def _sign_in_page(console: Console, *, problem: str, status: int) -> Template:
    login_csrf = secrets.token_urlsafe(32)
    return Template(
        template_name="sign_in.html",
        context={"console": console, "login_csrf": login_csrf, "problem": problem},
        status_code=status,
        cookies=[_cookie(console, LOGIN_CSRF_COOKIE, login_csrf, path="/console/sign-in", max_age=3600)],
    )


@get("/sign-in/oidc")
async def start_oidc(request: Request[Any, Any, Any]) -> Response[Any]:
    console = Console.of(request)
    if console.oidc is None:
        raise PageNotFoundError(text("single sign-on is not configured"))
    pending = console.pending.start()
    try:
        url = await console.oidc.authorization_url(pending)
    except SignInError as exc:
        await _record_failure(request, console, exc.reason)
        return _sign_in_page(console, problem=text("The identity provider cannot be reached."), status=502)
    return Redirect(
        url,
        status_code=303,
        cookies=[
            _cookie(console, STATE_COOKIE, pending.state, path="/console/callback", max_age=_STATE_TTL_S)
        ],
    )


@get("/callback")
async def oidc_callback(
    request: Request[Any, Any, Any],
    code: FromQuery[str | None] = None,
    sign_in_state: Annotated[str | None, QueryParameter(name="state")] = None,
    error: FromQuery[str | None] = None,
) -> Response[Any]:
    console = Console.of(request)
    if console.oidc is None:
        raise PageNotFoundError(text("single sign-on is not configured"))
    pending = console.pending.finish(sign_in_state, request.cookies.get(STATE_COOKIE))
    try:
        if pending is None:
            raise SignInError("unknown, expired, replayed or foreign sign-in state")
        if error is not None or not code:
            raise SignInError(f"IdP returned error {error[:64] if error else 'without code'}")
        principal = await console.oidc.finish(code, pending)
    except SignInError as exc:
        await _record_failure(request, console, exc.reason)
        page = _sign_in_page(console, problem=text("Sign-in failed. Please try again."), status=401)
        page.cookies.append(_cleared(console, STATE_COOKIE, "/console/callback"))
        return page
    response = await _signed_in(request, console, principal, "oidc")
    response.cookies.append(_cleared(console, STATE_COOKIE, "/console/callback"))
    return response


@post("/sign-in/dev", status_code=303)
async def dev_sign_in(request: Request[Any, Any, Any]) -> Response[Any]:
    console = Console.of(request)
    if not console.is_dev_sign_in:
        raise PageNotFoundError(text("dev sign-in is off"))
    await check_csrf(request, request.cookies.get(LOGIN_CSRF_COOKIE, ""))
    form = await request.form()
    token = form.get("token")
    try:
        if not isinstance(token, str):
            raise AuthenticationError("no token")
        principal = await console.services.verifier.verify(f"Bearer {token.strip()}")
        if principal.issuer != DEV_ISSUER:
            raise AuthenticationError("not a dev-issuer token")
    except AuthenticationError as exc:
        await _record_failure(request, console, f"dev sign-in: {exc.reason}")
        return _sign_in_page(console, problem=text("Sign-in failed. Please try again."), status=401)
    return await _signed_in(request, console, principal, "dev issuer")


@post("/sign-out", status_code=303)
async def sign_out(request: Request[Any, Any, Any]) -> Response[Any]:
    console = Console.of(request)
    try:
        session = await console.session(request)
    except NotSignedInError:
        return Redirect("/console/sign-in", status_code=303)
    await console.sessions.end(request.cookies.get(SESSION_COOKIE))
    await console.record(
        request,
        session.principal,
        EventType.AUDIT_ACCESS,
        Decision.ALLOW,
        status=303,
        detail="console sign-out",
    )
    return Redirect(
        "/console/sign-in", status_code=303, cookies=[_cleared(console, SESSION_COOKIE, "/console")]
    )


async def _signed_in(
    request: Request[Any, Any, Any], console: Console, principal: Principal, how: str
) -> Response[Any]:
    # A fresh id at every sign-in (no fixation); any session this browser had is ended.
    await console.sessions.end(request.cookies.get(SESSION_COOKIE))
    session_id, _ = await console.sessions.create(principal)
    await console.record(
        request,
        principal,
        EventType.AUDIT_ACCESS,
        Decision.ALLOW,
        status=303,
        detail=f"console sign-in ({how})",
    )
    return Redirect(
        "/console/audit",
        status_code=303,
        cookies=[
            _cookie(
                console,
                SESSION_COOKIE,
                session_id,
                path="/console",
                max_age=console.config.session_absolute_s,
            ),
            _cleared(console, LOGIN_CSRF_COOKIE, "/console/sign-in"),
        ],
    )


async def _record_failure(request: Request[Any, Any, Any], console: Console, reason: str) -> None:
    await console.record(
        request,
        None,
        EventType.AUTHENTICATION_FAILURE,
        Decision.DENY,
        status=401,
        reason=f"console: {reason}",
    )


SIGN_IN_ROUTES = [console_home, sign_in_page, start_oidc, oidc_callback, dev_sign_in, sign_out]
