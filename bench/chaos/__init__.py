"""The chaos suite: real worker processes on a Redis of its own (append-only) and a
PostgreSQL, with faults injected while jobs run, counting what was lost, run twice or stuck.

``python -m bench.chaos`` runs every scenario at full size; ``make test`` runs its
``--quick`` sizes as a step of its own (``make chaos-quick``). Spawned worker processes
import this package: keep it light.
"""
