"""Plugins shipped with toolwire; each is registered like a third-party plugin."""
