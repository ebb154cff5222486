"""Threads and their bookkeeping: per-run mailboxes (actors), the pool, timers, waiters.

No run logic lives here: these are the places work waits and the threads that pick
it up, bounded so that an idle run costs no thread.
"""
