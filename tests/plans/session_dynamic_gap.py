# a session window whose gap is an expression
# fail: WINDOW_FORM
gap = F.when(F.col("k") > 1, "5 seconds").otherwise("10 seconds")
df = s.groupBy(F.session_window("ts", gap), "k").count()
