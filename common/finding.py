"""What a content filter found in a request or response: the kind, how often and what was done.

Filters produce findings; the audit log records them and the gateway tallies them into metrics.
The matched text itself never leaves the filter.
"""

from __future__ import annotations

import msgspec


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """A content-filter finding: never the matched value itself."""

    type: str
    count: int
    action: str
    direction: str = "request"
