"""The demo of the ingestion service (``speedtier up --demo``, ``make run``).

A bundled sample knowledge base (a small website served on loopback, and a file of each
supported type under ``samples/``) is ingested through the public API of a running system,
with progress shown, then searched. See :mod:`services.app.demo.run`.
"""
