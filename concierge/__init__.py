"""Concierge: the hotel concierge platform HTTP API (guest app and staff console back end)."""
