"""A run's history, as pure code: events, their fold into state, snapshots, the planner.

Nothing here touches a thread, a clock or the database: given the same log, it gives
the same state and the same next move, which is what makes replay and recovery safe.
"""
