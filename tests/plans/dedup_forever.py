# dropDuplicates without the event time: every key kept, as Spark keeps it
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicates(['k']): no event time among the keys, every key kept in state (as Spark keeps it)
#     output     ts, k, price
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   stage 0      dedup {"key": ["k"], "column": "ts", "delay": null}  [segment 0: 1 task(s), keys ['k']]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}]]]
df = s.dropDuplicates(["k"])
