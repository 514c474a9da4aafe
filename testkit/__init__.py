"""What the tests and the benchmarks both use, in one place neither of them owns.

``tests/`` and ``bench/`` never import each other (an import contract in ``setup.cfg``):
code both need lives here, and both import it.

* ``fakes/``: local HTTP servers speaking the providers' protocols, failures included
  (Notion, Zendesk, Confluence, Scribe, an OpenAI-compatible embeddings API, Sentry's
  envelope endpoint, a crawlable website);
* ``kb_scenario``: the knowledge-sync end-to-end scenario (fakes, a fresh database, real
  worker processes, measurements), run by ``tests/e2e/test_knowledge_sync_e2e.py`` and by
  ``python -m bench.kb_sync_e2e``; its parts are ``kb_fakes`` (its providers),
  ``kb_workers`` (its worker processes, and ``environment_of``: settings as a child's
  environment), ``window_sampler`` (the windows' counters, sampled) and ``kb_report`` (its
  report, and ``job_records``: a namespace's job records);
* ``search_corpus``: the synthetic retrieval corpus and its exact truth, loaded by the
  search tests and by ``python -m bench.search``.
* ``thread_counts``: each kind of thread's CPU and context switches, from ``/proc``, and
  what a series of samples says a job (``python -m bench.lone_jobs --by-thread``).

Test-only code: no production package (shared, tiers, router, services) may import it
(another contract), and it is not in the wheel (``setup.cfg`` lists the packages that ship).
It runs from a checkout, where the repository root is on the path (pytest's rootdir,
``python -m bench``, and the ``PYTHONPATH`` the scenario gives its worker processes).
"""

import os

# An unset SPEEDTIER_ENV means production, which refuses a short token, a missing credentials
# key and volatile Redis: test and benchmark code and the processes they start run as test unless a
# scenario says otherwise.
os.environ.setdefault("SPEEDTIER_ENV", "test")
