# a rank ordered by a column computed between withWatermark and the window column
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     top-n      row_number() <= 1 per window(ts, 0:00:10) ORDER BY p2 ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, p2, rn
#   Spark runs: the source, Project over parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
x = s.withColumn("p2", F.col("price") * 2)
df = x.withColumn("rn", F.row_number().over(Window.partitionBy(F.window("ts", "10 seconds")).orderBy("p2"))).filter("rn <= 1")
