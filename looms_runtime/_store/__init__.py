"""The runtime's storage: row values, reads, fenced writes, starts, leases, retention.

Every SQL statement of the runtime lives here, and so does the boundary that turns
driver errors into runtime errors (`driver_errors`). The group committer is the one
thread that owns the hot writes.
"""
