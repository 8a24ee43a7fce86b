"""Errors raised by the content filter.

Classes carry ``status_code`` and an OpenAI-style ``code`` so the gateway maps them to
responses in one place; messages never contain the matched text.
"""

from __future__ import annotations


class FilterError(Exception):
    """Base class for every content-filter error."""

    status_code: int = 500
    code: str = "filter_error"


class ContentBlockedError(FilterError):
    """The content violated the filter policy. Raised by callers that prefer exceptions."""

    status_code = 400
    code = "content_policy_violation"

    def __init__(self, types: tuple[str, ...] = ()) -> None:
        self.types = types
        super().__init__("content blocked by policy")


class PolicyError(FilterError):
    """A filter policy or keyword file is missing or invalid; the previous policy stays active."""

    code = "filter_policy_invalid"


class ScanBudgetError(FilterError):
    """The text to filter is more than ``filters.max_scan_chars`` allows; refused unscanned (fail closed)."""

    status_code = 413
    code = "content_too_large"

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        super().__init__(
            f"the text to filter exceeds the content filter's limit of {max_chars} characters"
            " (filters.max_scan_chars)"
        )


class DetectorFailedError(FilterError):
    """A detector raised; the pipeline fails closed on it."""

    code = "filter_detector_failed"

    def __init__(self, detector: str, reason: str) -> None:
        self.detector = detector
        self.reason = reason
        super().__init__(f"detector {detector} failed: {reason}")
