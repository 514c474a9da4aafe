"""Egress: which addresses an outbound call may connect to, and the session that checks them.

=================  =========================================================================
module             concept
=================  =========================================================================
``addresses``      which addresses may be connected to, and why not (``AddressRefused``)
``session``        the guarded ``requests`` session every outbound call goes through, and
                   the same-origin rule for links a provider answers with
=================  =========================================================================

Every HTTP client of the project is built on :func:`~shared.egress.session.guarded_session`
(``tests/unit/shared/test_egress_only.py`` refuses a bare ``requests``/``httpx`` client
anywhere else).
"""
