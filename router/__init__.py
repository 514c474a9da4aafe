"""The one door into the queues: request -> family -> tier -> queue, deterministic job id."""
