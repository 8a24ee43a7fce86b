"""English and Simplified Chinese for the console: the browser's language, or the officer's switch.

The choice is made once per request (cookie ``strongroom_console_lang`` if set, else the first of
``en``/``zh`` in ``Accept-Language``) and read by the templates' ``_()`` through a context
variable, so no handler has to pass it along. Audit data is never translated; messages built in
Python (errors, notices) stay in English.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from litestar import Request

__all__ = ["LANGUAGES", "LANG_COOKIE", "Language", "text"]

LANGUAGES = ("en", "zh")
LANG_COOKIE = "strongroom_console_lang"

_current: ContextVar[str] = ContextVar("console_language", default="en")

ZH: dict[str, str] = {
    "Strongroom console": "Strongroom 控制台",
    "Search": "检索",
    "Charts": "图表",
    "Verify": "校验",
    "Export": "导出",
    "Administration": "管理",
    "Sign out": "退出",
    "Sign in": "登录",
    "Sign in with single sign-on": "使用单点登录",
    "Development token": "开发令牌",
    "Sign in with dev token": "使用开发令牌登录",
    "No sign-in method is configured: set": "未配置登录方式：请设置",
    "Audit search": "审计检索",
    "User": "用户",
    "Role": "角色",
    "Tenant": "租户",
    "Model": "模型",
    "Decision": "决定",
    "Event type": "事件类型",
    "Finding": "检出项",
    "From": "开始",
    "Until": "截止",
    "any": "全部",
    "Time (UTC)": "时间 (UTC)",
    "Event": "事件",
    "Roles": "角色",
    "Endpoint": "接口",
    "Status": "状态",
    "Findings": "检出项",
    "No records match.": "没有匹配的记录。",
    "First page": "第一页",
    "Next page →": "下一页 →",
    "Audit record": "审计记录",
    "content kept": "保留的内容",
    "Show prompt and completion (this view is audited)": "显示提示与回复（此次查看将被审计）",
    "Reading the content needs the": "查看内容需要权限",
    "permission.": "。",
    "← Back to search": "← 返回检索",
    "← Back to the record": "← 返回记录",
    "Prompt": "提示",
    "Completion": "回复",
    "Chain verification": "链校验",
    "Newest signed checkpoint": "最新签名检查点",
    "index": "序号",
    "covers records": "覆盖记录",
    "written": "已写入",
    "signed at": "签名时间",
    "chain head": "链头",
    "key": "密钥",
    "final": "最终",
    "No checkpoint yet.": "尚无检查点。",
    "download the public key": "下载公钥",
    "Verify the whole chain now": "立即校验整条链",
    "Intact": "完好",
    "NOT intact": "已损坏",
    "records checked": "已校验记录",
    "checkpoints checked": "已校验检查点",
    "signed up to": "签名覆盖至",
    "witnessed up to": "见证覆盖至",
    "newest checkpoint": "最新检查点",
    "key pinned": "密钥已固定",
    "first bad record": "首条损坏记录",
    "problem": "问题",
    "record": "记录",
    "Format": "格式",
    "JSONL bundle, signed (verifiable offline)": "JSONL 签名包（可离线校验）",
    "CSV with chain hashes": "含链哈希的 CSV",
    "Download": "下载",
    "public key": "公钥",
    "Show": "显示",
    "Nothing in this range.": "此范围内没有数据。",
    "Denials per day": "每日拒绝次数",
    "Filter hits per day": "每日过滤命中",
    "Requests per model and role": "各模型与角色的请求数",
    "Tokens per model and role": "各模型与角色的令牌数",
    "Who may use which model": "模型使用授权",
    "Policy version": "策略版本",
    "Grant": "授予",
    "Engine pool": "推理引擎池",
    "refreshed every 5 s": "每 5 秒刷新",
    "Instance": "实例",
    "Health": "健康",
    "Models": "模型",
    "In flight": "进行中",
    "Running": "运行中",
    "Waiting": "等待中",
    "KV blocks used": "已用 KV 块",
    "Prefix-cache hits": "前缀缓存命中",
    "healthy": "正常",
    "down": "不可用",
    "No engines configured.": "未配置推理引擎。",
    "Back to the console": "返回控制台",
    "Language": "语言",
    "Users and roles": "用户与角色",
    "Remove": "移除",
    "Assign": "分配",
    "No user has a role from the policy yet.": "尚无用户被策略分配角色。",
    "Policy change history": "策略变更历史",
    "Version": "版本",
    "Change": "变更",
    "By": "操作人",
    "When": "时间",
    "No policy change recorded yet.": "尚无策略变更记录。",
    "Keys and sealed models": "密钥与密封模型",
    "Sealed models": "密封模型",
    "Seal": "密封",
    "Manifest SHA-256": "清单 SHA-256",
    "Path": "路径",
    "Pinned": "固定",
    "pinned": "已固定",
    "Registered": "登记",
    "No sealed model is registered.": "尚无登记的密封模型。",
    "Master key versions": "主密钥版本",
    "Key": "密钥",
    "State": "状态",
    "Signing public key": "签名公钥",
    "No key versions to show.": "无可显示的密钥版本。",
}


class Language:
    @staticmethod
    def choose(request: Request[Any, Any, Any]) -> str:
        chosen = request.cookies.get(LANG_COOKIE)
        if chosen in LANGUAGES:
            return chosen
        for part in request.headers.get("accept-language", "").split(","):
            tag = part.split(";")[0].strip().lower()
            if tag.startswith("zh"):
                return "zh"
            if tag.startswith("en"):
                return "en"
        return "en"

    @staticmethod
    def use(language: str) -> None:
        _current.set(language if language in LANGUAGES else "en")

    @staticmethod
    def current() -> str:
        return _current.get()

    @staticmethod
    def translate(text: str) -> str:
        return ZH.get(text, text) if _current.get() == "zh" else text


def text(template: str, **params: object) -> str:
    """A message built in Python, in the request's language: the template is translated, then
    filled (``params`` are values, never parsed as templates)."""
    return Language.translate(template).format(**params)
