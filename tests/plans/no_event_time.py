# a window over the window's start, not its window_time
# fail: NO_EVENT_TIME
w = s.groupBy(F.window("ts", "5 seconds"), "k").count()
df = w.groupBy(F.window("window.start", "10 seconds")).count()
