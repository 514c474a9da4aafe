"""One thread of a process at a time in CPU-bound indexing work, when all of it is.

A worker runs several jobs per process on threads (the fast tier: 4), and Python runs one
of them at a time (the GIL). With an embedder that runs in the process on the GIL (the
hashing embedder), an ingestion pass is CPU-bound from its extraction to its last vector,
so four threads of one process taking turns at it gain nothing over one, and pay for the
turns: the interpreter hands the GIL from one to another every switch interval (5 ms), and
each resumes on caches the others filled. Measured with ``python -m bench.ingestion_passes
--threads 4`` on a machine shared with other work (``docs/benchmarks.md``, provisional),
the process spent about a tenth more CPU a document than when its passes take that work one
at a time.

:func:`cpu_gate_for` gives such a pass this process's gate: the pass holds it while it
parses the document's bytes, splits the text and embeds the chunks, and nowhere else. Its
other work, the reads, the lock, the ``COPY`` and the commit (waits on PostgreSQL), and the
job platform's own threads go on as before, so a thread waiting at the gate lets the others'
I/O overlap. Nothing that waits outside the GIL is gated: an embedder calling a provider
over HTTP (or any embedder not marked :attr:`cpu_bound`) gets no gate at all, and
extraction holds it around parsing only, not around OCR (onnxruntime runs outside the GIL)
nor around fetching a page.

A pass holds the gate for one step at a time, and only for a step over at most
:data:`GATED_MAX_SIZE` of input: a large document's steps run ungated, trading the GIL as
before, so a small document's pass never queues behind a large one's seconds of splitting.

The gate is a plain lock taken by a ``with`` statement, so a job interrupted while it holds
it (a time limit, a cancellation: an exception raised in its thread) lets go of it, and one
interrupted while it waits for it sees the exception once it has it (the gated step of
another thread, milliseconds for a document of the benchmark's size). It guards nothing:
which thread holds it changes no result, only how the process's CPU is spent.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext

#: A step over more input than this (source bytes to parse, text characters to split or to
#: embed) runs ungated, as every step did before the gate, so no pass waits at the gate for
#: longer than another pass's step over this much (a tenth to a few tenths of a second on
#: the benchmark's machine; the benchmark's documents are 1 to 96 kB of text, all gated).
GATED_MAX_SIZE = 128 * 1024
#: The process's gate: one lock, shared by every pass of every thread.
_GATE = threading.Lock()
#: What a step holds when it runs ungated.
UNGATED: AbstractContextManager[object] = nullcontext()


def cpu_bound(embedder: object) -> bool:
    """Whether ``embedder`` computes its vectors in this process while holding the GIL (its
    class says so with a true ``cpu_bound`` attribute; an embedder without one does not)."""
    return getattr(embedder, "cpu_bound", False) is True


def cpu_gate_for(embedder: object, size: int) -> AbstractContextManager[object]:
    """The gate a pass with ``embedder`` holds around a CPU-bound step over ``size`` bytes
    or characters of input: this process's when :func:`cpu_bound` and ``size`` is at most
    :data:`GATED_MAX_SIZE`, else a context that holds nothing."""
    return _GATE if size <= GATED_MAX_SIZE and cpu_bound(embedder) else UNGATED
