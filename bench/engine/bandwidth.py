"""The H200's memory-bandwidth ceiling every GPU benchmark's floor is computed from."""

from __future__ import annotations

__all__ = ["COPY_BANDWIDTH"]

COPY_BANDWIDTH = 4.27e12
"""Measured H200 device-to-device copy bandwidth, bytes read + written per second (bench/ANCHORS.md)."""
