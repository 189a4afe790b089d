# a rank over session windows' rows
# fail: RANK_WINDOW
agg = s.groupBy(F.session_window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
df = agg.withColumn("rn", F.row_number().over(Window.partitionBy("session_window").orderBy("n"))).filter("rn < 2")
