"""The example seller, its mock upstreams and the scripted demo, inside the package so that
``adcp-stale-cache example`` and ``demo`` work from a wheel (``examples`` extra)."""
