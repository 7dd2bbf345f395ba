"""The example seller, its mock upstreams and the scripted demo.

They live inside the package so that ``adcp-stale-cache example ...`` and
``adcp-stale-cache demo`` work from an installed wheel. They need the ``examples`` extra.
"""
