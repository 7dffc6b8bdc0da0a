"""Network security appliance: ingests agent packet metadata, finds data exfiltration."""

__version__ = "0.1.0-alpha"
