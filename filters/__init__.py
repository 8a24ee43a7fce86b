"""Content filtering for Strongroom: PII with checksums, keyword lists, secrets, prompt injection.

The gateway builds one ``FilterPipeline`` and calls ``acheck_request`` / ``acheck_response`` /
``stream``; everything else here is the machinery behind those three.
"""

from __future__ import annotations

from filters.action import Action, Direction
from filters.config import FilterConfig
from filters.context import FilterContext, FilterResult, Hit, StreamStep
from filters.detector import Detector, Span
from filters.errors import (
    ContentBlockedError,
    DetectorFailedError,
    FilterError,
    PolicyError,
    ScanBudgetError,
)
from filters.normalized import NormalizedText, normalize
from filters.pipeline import FilterPipeline
from filters.policy import FilterPolicy, parse_policy
from filters.stream_filter import StreamFilter

__all__ = [
    "Action",
    "ContentBlockedError",
    "Detector",
    "DetectorFailedError",
    "Direction",
    "FilterConfig",
    "FilterContext",
    "FilterError",
    "FilterPipeline",
    "FilterPolicy",
    "FilterResult",
    "Hit",
    "NormalizedText",
    "PolicyError",
    "ScanBudgetError",
    "Span",
    "StreamFilter",
    "StreamStep",
    "normalize",
    "parse_policy",
]
