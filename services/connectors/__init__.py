"""Provider clients: one module per provider, no business.

Each client lists a source and fetches a document through ``base.SourceProvider`` (Notion,
Zendesk, Confluence, Scribe; ``registry`` maps source types to them), or, for the URL crawl,
binds the web kernel's fetcher to the settings (``url_crawl``). Products import connectors;
connectors import only ``shared``, ``tiers``, ``router`` and the web and indexing kernels.
"""
