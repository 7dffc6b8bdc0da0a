"""Native (C) parts of the appliance: the per-packet hot path (fastpath.c)."""
