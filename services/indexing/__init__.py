"""The indexing kernel: a document's text made into chunks, embeddings and index rows.

No business here: knowledge sync's chunk step (seed 000) and ingestion (seed 003) import it;
it imports only ``shared``, ``tiers`` and ``services.web``.

=================  =========================================================================
module             concept
=================  =========================================================================
``extract``        bytes (PDF, DOCX, HTML, markdown, text) to text, or a reason it cannot be
``chunking``       token-aware chunks, offline
``embedders``      text to vectors: hashing, a local model, an OpenAI-compatible API
``cpu_gate``       one thread of a process at a time in CPU-bound extract, split and embed
``chunk_batches``  embedding a chunk set and inserting its rows in bounded batches, packed
``index_writer``   the rule: a document's chunks replaced in one transaction; the Rails
                   ``document_chunks`` / ``pg_search_documents`` target
``kb_chunks``      the api2 ``kb_chunks`` target
=================  =========================================================================
"""
