"""The web kernel: everything about fetching a web page, and nothing about why.

No business here: products (knowledge sync's URL crawl, ingestion's URL documents) and
connectors import it; it imports only ``shared`` and ``tiers``. Which addresses may be
connected to is ``shared.egress`` (the guard every outbound call shares).

=================  =========================================================================
module             concept
=================  =========================================================================
``urls``           URLs as stored: WHATWG-normalised http(s), no fragment; origins
``pinned_get``     one GET on a connection to the checked address itself
``redirects``      following redirects, every hop guarded (and robots-checked)
``response_body``  a response's body, bounded in size and time, and decoded
``robots``         robots.txt per origin (``RobotsCache``, ``Disallowed``)
``politeness``     the per-host request window shared by every worker
``html``           HTML to title, markdown and same-host links
``fetch``          a page fetched and extracted (``fetch_page``, ``CrawledPage``)
``failures``       a fetch's failure sorted into terminal (``FetchFailed``) or transient
=================  =========================================================================
"""
