"""toolwire.templates."""
