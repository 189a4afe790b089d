# a grouping by the window struct beside a window of it
# fail: GROUPING_COLUMN
w = s.groupBy(F.window("ts", "5 seconds"), "k").count()
df = w.groupBy(F.window("window", "10 seconds"), "window").count()
