"""Knowledge-base ingestion and retrieval (seed 003), and the chunk/embed/index component
that knowledge_sync's chunk step shares."""
