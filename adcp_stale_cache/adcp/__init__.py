"""AdCP semantics: wholesale conditional fetch, feed reads and federated hops."""
