# a tumbling window in update mode
# mode: update
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: count = count(*)
#     output     window, k, count
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()
