"""One concept per module: admission, leases, pause, windows, outcomes."""
