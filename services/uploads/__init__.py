"""Conversation uploads (seed 001): validation checks, and native processing of XCALLY and
Outreach Kaia direct uploads (identities, media to WAV, the recording attachment)."""
