"""The agent's one error root; each subclass says which edge refused what."""

from __future__ import annotations


class AgentError(Exception):
    """Root of every error the agent raises on purpose."""


class ConfigError(AgentError):
    """The configuration file or a flag has a bad value (the message names the key and the value)."""


class CaptureFileError(AgentError):
    """A capture file (pcap or pcapng) cannot be read; the message names the file and the offset."""


class CaptureError(AgentError):
    """Live capture cannot start on this machine (permission, interface, platform)."""
