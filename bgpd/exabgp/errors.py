"""Errors of the ExaBGP adapter: one small hierarchy, so callers (the reconciler, the
speaker) classify outcomes without knowing ExaBGP's text or process details.

Every error raised out of this package is an ``ExaBGPError``; lower-level exceptions are
chained with ``raise ... from exc``.
"""

from __future__ import annotations


class ExaBGPError(Exception):
    """Base class of the ExaBGP adapter's errors."""


class RenderError(ExaBGPError):
    """The configuration cannot be turned into an ExaBGP configuration (a missing local
    address, no IPv4 router-id). The speaker logs it and keeps the previous rendering."""


class CrashLoopError(ExaBGPError):
    """ExaBGP died too often in a short time; restarting it again will not help. The
    speaker exits with this message so the orchestrator (kubelet) shows it."""


class DriverStoppedError(ExaBGPError):
    """The driver was asked to do something after stop()."""
