"""The operations behind the public API: starts, queries and external requests."""
