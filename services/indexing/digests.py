"""What "the content changed" means: SHA-256 (hex) digests of the text an index is made of.

Two formulas, each stored in its own columns and compared only with itself, so neither can
change without every document being indexed again once:

* :func:`content_hash` (a title and its content): Rails ``knowledge_base_documents`` and
  ``document_chunks`` (the knowledge sync and the index writer's Rails target);
* :func:`text_hash` (extracted text alone): api2 ``kb_documents`` and
  ``kb_document_versions`` (ingestion).
"""

from __future__ import annotations

import hashlib


def content_hash(title: str | None, content: str | None) -> str:
    """SHA-256 (hex) of ``title`` and ``content`` (None counts as empty); the NUL keeps the
    boundary between them unambiguous."""
    return hashlib.sha256(f"{title or ''}\x00{content or ''}".encode()).hexdigest()


def text_hash(text: str) -> str:
    """SHA-256 (hex) of extracted text."""
    return hashlib.sha256(text.encode()).hexdigest()
