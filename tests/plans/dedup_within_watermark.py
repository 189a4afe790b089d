# dropDuplicatesWithinWatermark of a key
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicatesWithinWatermark(['k'])
#     output     ts, k, price
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = s.dropDuplicatesWithinWatermark(["k"])
