# dropDuplicatesWithinWatermark of a key
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicatesWithinWatermark(['k'])
#     output     ts, k, price
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   stage 0      dedup {"key": ["k"], "column": "ts", "delay": "datetime.timedelta(seconds=10)"}  [segment 0: 1 task(s), keys ['k']]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}]]]
df = s.dropDuplicatesWithinWatermark(["k"])
