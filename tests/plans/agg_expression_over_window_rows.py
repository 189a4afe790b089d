# an aggregate of an expression gpuwm does not evaluate, over a window's rows
# fail: EXPRESSION
w = s.groupBy(F.window("ts", "5 seconds").alias("w"), "k").agg(F.count("*").alias("n"))
df = w.groupBy(F.window(F.window_time("w"), "10 seconds")).agg(F.sum(F.abs("n")))
