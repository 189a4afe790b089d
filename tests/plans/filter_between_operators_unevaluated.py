# a filter gpuwm does not evaluate between two windows
# fail: EXPRESSION
w = s.groupBy(F.window("ts", "5 seconds").alias("w"), "k").count()
df = w.filter("abs(count) > 1").groupBy(F.window(F.window_time("w"), "10 seconds")).count()
