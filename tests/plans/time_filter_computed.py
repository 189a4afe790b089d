# a filter on a column computed from the event time, between withWatermark and the window
# fail: TIME_FILTER
df = s.withColumn("t2", F.col("ts")).filter("hour(t2) > 3").groupBy(F.window("ts", "5 seconds"), "k").count()
