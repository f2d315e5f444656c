"""The staff's audit pages: per-run waterfalls and the period's statistics."""
