"""toolwire.apps.cli."""
