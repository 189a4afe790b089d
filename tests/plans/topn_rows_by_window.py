# a rank over a source's rows partitioned by a tumbling window column
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     top-n      rank() <= 2 per window(ts, 0:00:10), ['k'] ORDER BY price DESC NULLS LAST, ts ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, w, rn
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:10)
#   stage 0      topn {"window": "Tumble('ts', datetime.timedelta(seconds=10))", "by": ["k"], "order": [["price", true, false], ["ts", false, true]], "n": 2, "fn": "rank", "output": "__gpuwm_rank"}  [segment 0: 1 task(s), keys ['k']]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["w", {"tumble": [{"col": "ts"}, 10000000]}], ["rn", {"col": "__gpuwm_rank"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["w", {"col": "w"}], ["rn", {"col": "rn"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["w", {"col": "w"}], ["rn", {"col": "rn"}]]]
df = s.withColumn("w", F.window("ts", "10 seconds")).withColumn(
    "rn", F.rank().over(Window.partitionBy("w", "k").orderBy(F.desc("price"), "ts"))).filter(F.col("rn") < 3)
