"""The Rails kernel: what every product that talks to Rails' ``/internal/*`` endpoints or
shares its outbound-delivery ledger is built with (seed 001).

| module | what it gives a product |
| --- | --- |
| ``client`` | :class:`~services.rails.client.RailsClient`: one HTTP client for Rails' internal
  endpoints, answers classified into the platform's outcomes |
| ``delivery_claims`` | :func:`~services.rails.delivery_claims.deliver_once`: claim, send, mark
  delivered / release / leave unresolved, over ``public.outbound_delivery_claims`` |

A kernel: it imports only shared/, tiers/ and router/, never a product or the assembly.
"""
