"""The API toolkit: what every route of the internal API is built with, the platform's own
and the products' alike.

| module | what it gives a route |
| --- | --- |
| ``errors`` | one JSON error body per failure, the app's error handlers, 503 with Retry-After |
| ``auth`` | the bearer check on ``/internal``, the 401 challenge |
| ``context`` | the :class:`~router.context.ServiceContext` serving the request |
| ``openapi`` | ``describe``: what a view takes and answers, for the OpenAPI document |
| ``schemas`` | strict request bases, enqueue answers, error bodies |
| ``validation`` | strict parsing of bodies and query strings into 400s, the ``id`` converter |
| ``request`` | the request class that bounds bodies without ``Content-Length`` |
| ``enqueue`` | the shared ``POST .../enqueue`` route |

A kernel: it imports only shared/, tiers/ and router/, never a product or the assembly
(``services.app``), which builds the app from these pieces.
"""
