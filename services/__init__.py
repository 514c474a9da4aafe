"""Business areas (one package each) and the process assemblies: bootstrap, API, scheduler, CLI."""
