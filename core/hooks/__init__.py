"""toolwire.hooks."""
