"""toolwire.backends.protocol."""
