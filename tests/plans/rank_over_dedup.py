# a rank over a dedup's rows
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     dedup      dropDuplicatesWithinWatermark(['k'])
#     top-n      row_number() <= 1 per window(ts, 0:00:10) ORDER BY price ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, rn
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   stage 0      dedup {"key": ["k"], "column": "ts", "delay": "datetime.timedelta(seconds=10)"}  [segment 0: 1 task(s), keys ['k']]
#   stage 1      topn {"window": "Tumble('ts', datetime.timedelta(seconds=10))", "by": [], "order": [["price", false, true]], "n": 1, "fn": "row_number", "output": "__gpuwm_rank"}  [segment 0: 1 task(s), keys []]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["window", {"tumble": [{"col": "ts"}, 10000000]}], ["rn", {"col": "__gpuwm_rank"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["window", {"col": "window"}], ["rn", {"col": "rn"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["rn", {"col": "rn"}]]]
d = s.dropDuplicatesWithinWatermark(["k"])
df = d.withColumn("rn", F.row_number().over(Window.partitionBy(F.window("ts", "10 seconds")).orderBy("price"))).filter("rn <= 1")
