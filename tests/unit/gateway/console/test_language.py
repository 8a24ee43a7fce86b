"""Every message of the console has its Simplified Chinese: the templates' ``_("…")``, the
messages built in Python (``text("…")``, the admin notices, error titles), with the same
placeholders; and a Chinese browser gets Python-built errors and notices in Chinese."""

from __future__ import annotations

import ast
import asyncio
import re
import string
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.console import admin_pages, errors
from gateway.console.language import ZH
from tests.unit.gateway.console.console_app import console_app, sign_in

CONSOLE = Path(admin_pages.__file__).parent
ZH_BROWSER = {"accept-language": "zh-CN,zh;q=0.9"}


def _python_messages() -> set[str]:
    found: set[str] = set(admin_pages._DONE.values())
    for source in CONSOLE.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "text" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Subscript) and getattr(first.value, "id", None) == "_DONE":
                    continue  # the admin notices, collected above
                assert isinstance(first, ast.Constant), f"{source.name}: text() needs a literal template"
                found.add(first.value)
    found |= {
        c.title for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ConsoleError)
    }
    return found


def _template_messages() -> set[str]:
    found: set[str] = set()
    for template in (CONSOLE / "templates").glob("*.html"):
        found |= set(re.findall(r'_\("((?:[^"\\]|\\.)*)"\)', template.read_text()))
    return found


def _fields(message: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}


def test_every_console_message_has_chinese_with_the_same_placeholders() -> None:
    messages = _python_messages() | _template_messages()
    assert len(messages) > 150
    missing = sorted(m for m in messages if m not in ZH)
    assert missing == []
    assert [m for m in messages if _fields(m) != _fields(ZH[m])] == []


def test_a_chinese_browser_gets_python_built_errors_and_notices_in_chinese(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(console_app(tmp_path, state)) as client:
            client.headers.update(ZH_BROWSER)
            await sign_in(client, tmp_path, "wang", "compliance")
            refused = await client.get("/console/admin/quotas")
            assert refused.status_code == 403
            assert "<h1>不允许</h1>" in refused.text and "此页面需要 admin:policy" in refused.text
            missing = await client.get("/console/audit/records/999")
            assert missing.status_code == 404 and "没有审计记录 999" in missing.text
            forged = await client.post("/console/audit/verify", data={"_csrf": "guess"})
            assert forged.status_code == 403 and "表单已过期" in forged.text

            client.cookies.clear()
            page = await client.get("/console/sign-in")
            csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            failed = await client.post("/console/sign-in/dev", data={"_csrf": csrf.group(1), "token": "x"})
            assert failed.status_code == 401 and "登录失败，请重试。" in failed.text

            await sign_in(client, tmp_path, "root", "admin")
            admin = await client.get("/console/admin/quotas")
            token = re.findall(r'name="_csrf" value="([^"]+)"', admin.text)[0]
            done = await client.post(
                "/console/admin/quotas",
                data={
                    "_csrf": token,
                    "kind": "role",
                    "name": "analyst",
                    "domain": "*",
                    "requests_per_minute": "5",
                },
            )
            assert "root 设置了配额：role analyst in *: requests_per_minute=5。" in done.text
            bad = await client.post(
                "/console/admin/quotas",
                data={"_csrf": token, "kind": "role", "name": "analyst", "requests_per_minute": "x"},
            )
            assert "未更改：" in bad.text and "必须是不小于 1 的整数" in bad.text
            granted = await client.post(
                "/console/admin/assignments",
                data={"_csrf": token, "op": "assign", "user": "erin", "role": "analyst"},
                headers={"hx-request": "true"},
            )
            assert "版本 2：root 将角色 analyst 分配给 erin。" in granted.text
            english = await client.get("/console/admin/quotas", headers={"accept-language": "en"})
            assert "Quotas" in english.text and "配额" not in english.text.split("<main>")[1]

    asyncio.run(go())
