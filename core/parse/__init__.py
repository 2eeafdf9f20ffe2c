"""toolwire.parse."""
