"""chaoslog's faults: injectors that break a cluster, nemesis schedules that
decide when, and the Toxiproxy-compatible proxy that degrades links."""
