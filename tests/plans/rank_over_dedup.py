# a rank over a dedup's rows
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicatesWithinWatermark(['k'])
#     top-n      row_number() <= 1 per window(ts, 0:00:10) ORDER BY price ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, rn
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
d = s.dropDuplicatesWithinWatermark(["k"])
df = d.withColumn("rn", F.row_number().over(Window.partitionBy(F.window("ts", "10 seconds")).orderBy("price"))).filter("rn <= 1")
