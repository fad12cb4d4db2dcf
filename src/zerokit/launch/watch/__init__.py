"""What watches the ranks launch starts: the supervisor (starts them, waits, passes signals on, names each end),
the stall watch (no progress on any rank), the heartbeats (a node cut off), and how an end is read: exits (which are
machine faults, those a restart answers) and oom (a rank the kernel's OOM killer ended)."""
