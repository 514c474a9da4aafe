"""Provider clients: one module per provider, no business.

Each client lists a source and fetches a document through ``base.SourceProvider`` (Notion,
Zendesk, Confluence, Scribe; ``registry`` maps source types to them), or, for the URL crawl,
binds the web kernel's fetcher to the settings (``url_crawl``). The super sources (seed 004)
walk and fetch nodes through ``nodes.NodeSource`` (``github``, ``linear``, ``gitlab``,
``git_repository``, ``notion_nodes``, ``website``; shared HTTP pieces in ``node_http``), and
verify and parse their webhooks with each module's ``verify``/``parse``. Products import connectors;
connectors import only ``shared``, ``tiers``, ``router`` and the web and indexing kernels.
"""
