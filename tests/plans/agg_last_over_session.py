# last over a session window: Spark takes a session's rows in event-time order
# fail: AGG_POSITIONAL
df = s.groupBy(F.session_window("ts", "5 seconds"), "k").agg(F.last("price"))
