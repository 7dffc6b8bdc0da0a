"""Native (C) parts of the appliance: the per-packet hot path (fastpath.c) and DPI helpers the analysis
side calls for nearly every flow (dpi.c)."""
