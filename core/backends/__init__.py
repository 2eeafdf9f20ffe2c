"""toolwire.vocabulary.backend."""
