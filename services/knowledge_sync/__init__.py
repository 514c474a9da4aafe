"""Knowledge Library sync (seed 000): sources, documents, chunks and crawls from providers."""
