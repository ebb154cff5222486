"""The engine: drives one run at a time, hosts Python flow sessions, recovers and maintains.

`drive.Engine` is the handler of every run operation; `maintenance` is the
housekeeping thread (heartbeat, takeover, requests from other processes, sweep,
retention); `recovery` resumes many runs at once.
"""
