"""Sans-I/O: policies, the caching decision, entries, keys, failures and advisories."""
