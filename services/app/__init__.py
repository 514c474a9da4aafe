"""The assembly: the only package that knows every product, and that nothing imports.

- ``bootstrap``: one process's platform (settings, broker, middleware, router, flags,
  database) and every product's ``register(platform)``.
- ``api/``: the Flask app factory, the platform's own routes (probes, ``/internal/jobs``,
  the OpenAPI document) and gunicorn's JSON-answering worker.
- ``scheduler``: the tick scheduler (leader lock, slot ids).
- ``cli/``: the ``speedtier`` command, with the products' command groups wired in.
- ``worker_pool``, ``supervisor``, ``namespace_claim``: ``speedtier worker --processes N``
  and ``speedtier up``'s process group, one ``up`` per Redis namespace.
- ``readiness``: the Redis and PostgreSQL probe behind ``/readyz`` and ``speedtier ready``.
- ``embedded/``: the embedded Redis and PostgreSQL of ``speedtier up``.
- ``demo/``: ``speedtier up --demo``.

Products and kernels see a process only through :class:`router.context.ServiceContext`.
"""
