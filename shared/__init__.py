"""The ground floor: configuration, database, flags, errors, logging. Imports nothing above it."""
