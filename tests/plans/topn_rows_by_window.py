# a rank over a source's rows partitioned by a tumbling window column
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     top-n      rank() <= 2 per window(ts, 0:00:10), ['k'] ORDER BY price DESC NULLS LAST, ts ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, w, rn
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = s.withColumn("w", F.window("ts", "10 seconds")).withColumn(
    "rn", F.rank().over(Window.partitionBy("w", "k").orderBy(F.desc("price"), "ts"))).filter(F.col("rn") < 3)
