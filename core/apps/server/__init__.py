"""toolwire.apps.server."""
