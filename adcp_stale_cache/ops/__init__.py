"""Operating the cache: control, the operator page, metrics, tracing, configuration."""
