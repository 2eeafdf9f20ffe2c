"""toolwire.conversation."""
