"""Pure logic, no I/O: states, transitions, leases, fences, retry decisions, clocks."""
