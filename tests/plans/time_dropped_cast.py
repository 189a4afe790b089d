# the event time cast away and made again between withWatermark and the window
# fail: TIME_DROPPED
df = (s.select("k", F.col("ts").cast("long").alias("t")).select("k", F.timestamp_seconds("t").alias("ts"))
      .groupBy(F.window("ts", "5 seconds"), "k").count())
