"""Flow aggregation."""
