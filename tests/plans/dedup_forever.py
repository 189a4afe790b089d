# dropDuplicates without the event time: every key kept, as Spark keeps it
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicates(['k']): no event time among the keys, every key kept in state (as Spark keeps it)
#     output     ts, k, price
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = s.dropDuplicates(["k"])
