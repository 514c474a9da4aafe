"""Message options: every key the platform reads or writes on a Dramatiq message.

Dramatiq's ``actor_options`` idea, applied to the message: each key has one name here and
code says ``message.options[JOB_ID]``, never the bare string. The wire values are what
messages already in Redis carry; change one only while still reading the old one.

=======================  =================  ===============  ===============================
constant                 wire key           written by       meaning
=======================  =================  ===============  ===============================
``JOB_ID``               ``st_job``         router           the deterministic job id
``ORGANIZATION``         ``st_org``         router           organization id ("" for none)
``GROUP``                ``st_group``       router           group key, absent without cap
``GROUP_CAP``            ``st_cap``         router           the group's concurrency cap
``KEEP_FINISHED``        ``st_keep``        router           a finished id still dedupes
``PROVIDER``             ``st_provider``    router           provider called (window key)
``WINDOW_SCOPE``         ``st_scope``       router           window scope below provider
``FAILURES``             ``st_failures``    outcomes         attempts spent so far
``DELAY_STREAK``         ``st_delays``      outcomes         provider delays since the
                                                             last attempt ended
``DELAY_SINCE``          ``st_dsince``      outcomes         epoch s the delay streak began
``CHECKPOINT``           ``st_ckpt``        a handler's      where a long unit resumes (its
                                            ``Delay`` carry  own format); kept by retries
``WINDOW_RESERVATION``   ``st_wres``        rate windows     a reserved start,
                                                             ``<key>#<window>``, good for
                                                             one delivery
``WINDOW_ADMITTED``      ``st_window``      windows          the window that counted the run
``REDIS_MESSAGE_ID``     ``redis_message_   Dramatiq's       one delivery's id in the
                         id``               Redis broker     broker (a new one per delay)
``ETA``                  ``eta``            Dramatiq         epoch ms of a delayed delivery
=======================  =================  ===============  ===============================

The Lua scripts read ``st_job`` from a message's JSON (``lua/_prelude.lua``) and cannot
import this module; keep the two in step.
"""

from __future__ import annotations

from typing import Final

JOB_ID: Final = "st_job"
ORGANIZATION: Final = "st_org"
GROUP: Final = "st_group"
GROUP_CAP: Final = "st_cap"
KEEP_FINISHED: Final = "st_keep"
PROVIDER: Final = "st_provider"
WINDOW_SCOPE: Final = "st_scope"
FAILURES: Final = "st_failures"
DELAY_STREAK: Final = "st_delays"
DELAY_SINCE: Final = "st_dsince"
CHECKPOINT: Final = "st_ckpt"
#: Short on the wire because it has been since the first delayed message; the name says it.
WINDOW_RESERVATION: Final = "st_wres"
WINDOW_ADMITTED: Final = "st_window"
REDIS_MESSAGE_ID: Final = "redis_message_id"
ETA: Final = "eta"
