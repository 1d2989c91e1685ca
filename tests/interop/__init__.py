"""Format-compatibility tests against the real mosaicml-streaming (run in the peer venv)."""
