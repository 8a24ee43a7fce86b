"""The ``/console`` router: pages, static files, the security headers and the one error page.

Every response under /console carries a Content-Security-Policy without ``unsafe-inline`` or
``unsafe-eval`` (scripts and styles come from /console/static only; htmx is vendored there, so
nothing is fetched at run time), ``no-store`` caching and no referrer to other sites. Templates autoescape
everything and undefined names are errors, not empty strings.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from litestar import Request, Response, Router, get
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException
from litestar.params import FromQuery
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar_htmx import HTMXRequest

from audit.errors import AuditQueryError
from gateway.console.admin_pages import ADMIN_PAGES
from gateway.console.audit_pages import AUDIT_PAGES
from gateway.console.chart_pages import CHART_PAGES
from gateway.console.errors import ConsoleError, NotSignedInError
from gateway.console.key_pages import KEY_PAGES
from gateway.console.language import LANG_COOKIE, LANGUAGES, Language
from gateway.console.quota_pages import QUOTA_PAGES
from gateway.console.sign_in_routes import SIGN_IN_ROUTES
from gateway.errors import GatewayError

__all__ = ["CSP", "build_console_router", "console_template_config"]

_HERE = Path(__file__).parent
log = logging.getLogger("strongroom.console")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "content-security-policy": CSP,
    "cache-control": "no-store",
    "referrer-policy": "same-origin",  # "no-referrer" makes Chromium send "Origin: null" on form posts
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
}


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.globals.update({"_": Language.translate, "lang": Language.current})
    return environment


async def _choose_language(request: Request[Any, Any, Any]) -> None:
    Language.use(Language.choose(request))


@get("/language")
async def switch_language(request: Request[Any, Any, Any], to: FromQuery[str] = "en") -> Redirect:
    """Remember the officer's language (a year) and go back to the console page they were on."""
    language = to if to in LANGUAGES else "en"
    referer = urlsplit(request.headers.get("referer", ""))
    same_site = referer.netloc == request.url.netloc and referer.path.startswith("/console/")
    back = referer.path + (f"?{referer.query}" if referer.query else "") if same_site else "/console/"
    cookie = Cookie(
        key=LANG_COOKIE, value=language, path="/console", httponly=True, samesite="lax", max_age=31536000
    )
    return Redirect(back, status_code=303, cookies=[cookie])


def console_template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(_environment()))


async def _security_headers(response: Response[Any]) -> Response[Any]:
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _error_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, NotSignedInError):
        if request.headers.get("hx-request") == "true":
            return Response(b"", status_code=401, headers={**_HEADERS, "hx-redirect": "/console/sign-in"})
        return Redirect("/console/sign-in", status_code=303, headers=_HEADERS)
    if isinstance(exc, ConsoleError):
        status, title, message = exc.status_code, exc.title, str(exc)
    elif isinstance(exc, AuditQueryError):
        status, title, message = 400, "Bad request", str(exc)
    elif isinstance(exc, GatewayError):
        status, title, message = exc.status_code, "Unavailable", exc.message
    elif isinstance(exc, HTTPException):
        status, title, message = exc.status_code, "Error", str(exc.detail)
    else:
        log.error("console error: %s", type(exc).__name__, exc_info=exc)
        status, title, message = 500, "Error", "Something went wrong."
    title, message = Language.translate(title), Language.translate(message)
    html = _environment().get_template("error.html").render(title=title, message=message, status=status)
    return Response(html, status_code=status, media_type="text/html", headers=_HEADERS)


def build_console_router() -> Router:
    static = create_static_files_router(path="/static", directories=[_HERE / "static"], name="console-static")
    return Router(
        path="/console",
        route_handlers=[
            *SIGN_IN_ROUTES,
            *AUDIT_PAGES,
            *CHART_PAGES,
            *ADMIN_PAGES,
            *KEY_PAGES,
            *QUOTA_PAGES,
            switch_language,
            static,
        ],
        before_request=_choose_language,
        request_class=HTMXRequest,
        after_request=_security_headers,
        exception_handlers={Exception: _error_page},
        include_in_schema=False,
    )
