"""Service packages: kernels (web, indexing, connectors, apikit), one product package per
business area, and the assembly on top (app)."""
