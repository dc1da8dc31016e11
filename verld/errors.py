"""One small error hierarchy.

Errors the *local* side made (a bad config, a bad call from our own code) are kept
apart from errors the *remote* side made (a client sending garbage, a device
answering out of step). Noise on the device line is not an exception at all: the
codecs count it and resync.
"""

from __future__ import annotations


class VerldError(Exception):
    """Base of every error verld raises on purpose."""


class ConfigError(VerldError):
    """The configuration is invalid; the message is meant for a human, complete."""


class RemoteProtocolError(VerldError):
    """A peer (client or device) broke the protocol."""


class LinkDown(VerldError):
    """The link to the device is not up."""


class CallTimeout(VerldError):
    """The device did not answer in time."""
