"""Provider clients: one module per provider, all speaking ``base.SourceProvider``."""
