# a rank over an aggregation's rows not partitioned by its window
# fail: RANK_STATE
agg = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
df = agg.withColumn("rn", F.row_number().over(Window.partitionBy("k").orderBy("n"))).filter("rn < 2")
