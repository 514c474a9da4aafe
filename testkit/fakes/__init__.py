"""Local HTTP servers that speak third-party protocols (with their failures) for tests."""
