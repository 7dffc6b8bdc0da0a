"""Thin sensor agents: capture, decode to the shared contract, stream to the appliance. No analysis."""

__version__ = "0.1.0"
