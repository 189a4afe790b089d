# an aggregation by the session window of the aggregation below
# fail: BY_SESSION_WINDOW
w = s.groupBy(F.session_window("ts", "5 seconds"), "k").count()
df = w.groupBy("session_window").agg(F.max("count").alias("m"))
