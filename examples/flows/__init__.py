"""Example durable Python flows (see examples/python-flow.yaml and docs/runtime.md)."""
