"""English and Simplified Chinese for the console: the browser's language, or the officer's switch.

The choice is made once per request (cookie ``strongroom_console_lang`` if set, else the first of
``en``/``zh`` in ``Accept-Language``) and read by the templates' ``_()`` through a context
variable, so no handler has to pass it along. Messages built in Python (errors, notices) go
through ``text(template, **values)``: the template is translated, then filled with values that
are never translated themselves. Audit data is never translated, and neither is what goes into
the audit log (reasons and details stay English for the officers who search it).
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
    "A CSV is for spreadsheets; verify the JSONL bundle of the same selection.": "CSV 供表格软件使用；请校验相同选择的 JSONL 签名包。",
    "A bundle holds every record of the range in chain order, with its checkpoints and a seal signed by the log's key; for one user, only that user's records, with a seal signed over exactly those. Check it anywhere with": "签名包按链顺序包含该范围内的全部记录、检查点以及由日志密钥签名的封签；按用户导出时只包含该用户的记录，封签恰好覆盖这些记录。可在任何地方用以下命令校验：",
    "Bad request": "请求有误",
    "Cancel": "取消",
    "Configured limits": "配置的限额",
    "Form expired": "表单已过期",
    "Kind": "类型",
    "Name": "名称",
    "No override is set.": "尚未设置覆盖。",
    "Not allowed": "不允许",
    "Not changed: {reason}": "未更改：{reason}",
    "Not confirmed": "未确认",
    "Not found": "未找到",
    "Now {key}: {rewrapped} model(s) rewrapped, retired: {retired}.": "当前为 {key}：已重新包装 {rewrapped} 个模型，已停用：{retired}。",
    "Overrides": "覆盖",
    "Per field, a user's own limits come first, then the most generous of its roles, then the default; an override in the caller's tenant comes before one for every tenant (*), which comes before the configuration.": "逐字段生效：先看用户自身的限额，再取其各角色中最宽松的一项，最后是默认值；调用方所属租户的覆盖优先于适用于所有租户 (*) 的覆盖，后者又优先于配置。",
    "Quotas": "配额",
    "Refused: {reason}.": "已拒绝：{reason}。",
    "Rotate now": "立即轮换",
    "Rotate the master key": "轮换主密钥",
    "Rotate the master key…": "轮换主密钥…",
    "Rotation creates a new master key version, rewraps the data key of every sealed model (registered, or under the data directory's models) and re-signs their manifests and the seal registry. Weights are not re-encrypted. Older versions are retired once no registered model needs them. It is what `strongroom keys rotate` does, recorded with your identity.": "轮换会创建新的主密钥版本，重新包装每个密封模型（已登记的，或数据目录 models 下的）的数据密钥，并重新签名其清单和密封登记表。权重不会重新加密。不再被任何已登记模型使用的旧版本将被停用。这与 `strongroom keys rotate` 的操作相同，并以您的身份记录审计。",
    "Seal registry: {reason}": "密封登记表：{reason}",
    "Set": "设置",
    "Sign-in failed. Please try again.": "登录失败，请重试。",
    "The identity provider cannot be reached.": "无法连接身份提供方。",
    "The key provider cannot be opened: {reason}": "无法打开密钥提供方：{reason}",
    "The key provider failed: {reason}": "密钥提供方出错：{reason}",
    "Type the current version to confirm": "输入当前版本以确认",
    "Unavailable": "暂不可用",
    "Error": "错误",
    "Something went wrong.": "出现错误。",
    "Version {version}: {who} assigned {role} to {user}.": "版本 {version}：{who} 将角色 {role} 分配给 {user}。",
    "Version {version}: {who} granted {action} on {model} to {role}.": "版本 {version}：{who} 授予 {role} 对 {model} 的 {action} 权限。",
    "Version {version}: {who} revoked {action} on {model} from {role}.": "版本 {version}：{who} 撤销了 {role} 对 {model} 的 {action} 权限。",
    "Version {version}: {who} unassigned {role} from {user}.": "版本 {version}：{who} 取消了 {user} 的角色 {role}。",
    "cross-origin form": "跨源提交的表单",
    "default": "默认",
    "dev sign-in is off": "开发令牌登录已关闭",
    "everyone": "所有用户",
    "failed": "失败",
    "format must be jsonl or csv": "格式必须是 jsonl 或 csv",
    "missing or wrong CSRF token": "CSRF 令牌缺失或错误",
    "no audit record {seq}": "没有审计记录 {seq}",
    "no records in that time range": "该时间范围内没有记录",
    "no records of that user in that time range": "该用户在该时间范围内没有记录",
    "op must be {one} or {other}": "操作必须是 {one} 或 {other}",
    "role": "角色",
    "user": "用户",
    "single sign-on is not configured": "未配置单点登录",
    "the console is disabled": "控制台已停用",
    "the key provider has no current version": "密钥提供方没有当前版本",
    "the session store is unreachable": "无法连接会话存储",
    "this page covers every tenant's records": "此页面涵盖所有租户的记录",
    "this page needs {permissions}": "此页面需要 {permissions} 权限",
    "this record's content cannot be opened": "无法打开此记录的内容",
    "type {version} to confirm; nothing was rotated": "请输入 {version} 以确认；未进行轮换",
    "your audit rights cover your own tenant's records only": "您的审计权限仅涵盖本租户的记录",
    "{field} must be a whole number >= 1 (or left blank), not {value!r}": "{field} 必须是不小于 1 的整数（或留空），而不是 {value!r}",
    "{who} removed the quota override of {what}.": "{who} 删除了 {what} 的配额覆盖。",
    "{who} set quota: {what}.": "{who} 设置了配额：{what}。",
    "requests_per_minute": "每分钟请求数",
    "tokens_per_minute": "每分钟令牌数",
    "concurrent_requests": "并发请求数",
    "max_tokens_ceiling": "max_tokens 上限",
    "Record {seq}": "记录 {seq}",
    "Audit record {seq}": "审计记录 {seq}",
    "Record {seq}: content": "记录 {seq}：内容",
    "Audit record {seq}: content": "审计记录 {seq}：内容",
    "prev hash": "前一哈希",
    "hash": "哈希",
    "1 – {last} (of {written} written)": "1 – {last}（共写入 {written}）",
    "Log": "日志",
    "signing key": "签名密钥",
    "{count} (last {seq})": "{count}（最后 {seq}）",
    "a grant of this model (click to revoke)": "对该模型的授权（点击撤销）",
    "allowed through a pattern or an inherited role": "通过通配规则或继承角色获得许可",
    "click an empty cell to grant": "点击空白格授予",
    "Every change is an audit record.": "每次变更都会记入审计日志。",
    "role / model": "角色 / 模型",
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
