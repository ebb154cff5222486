"""Effect executors: command, HTTP and Python steps, each run outside the run's actor."""
