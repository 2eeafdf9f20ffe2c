"""toolwire.apps."""
