"""The hub and the stages of one fetch: look up, admit, fly, serve."""
