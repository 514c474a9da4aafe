"""Alembic migrations (branches ``rails`` and ``api2``); run them with :mod:`shared.db.migrate`.

A package so that ``env.py`` ships with the distribution; the revision files and the
template ship as package data of ``shared``.
"""
