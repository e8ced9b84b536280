"""The one kit for tests, benchmarks and the lab: manifests, waiting, processes."""
