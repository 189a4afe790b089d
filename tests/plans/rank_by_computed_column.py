# a rank ordered by a column computed between withWatermark and the window column
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     top-n      row_number() <= 1 per window(ts, 0:00:10) ORDER BY p2 ASC NULLS FIRST: emitted when the window closes
#     output     ts, k, price, p2, rn
#   Spark runs: the source, Project over parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:10)
#   stage 0      topn {"window": "Tumble('ts', datetime.timedelta(seconds=10))", "by": [], "order": [["p2", false, true]], "n": 1, "fn": "row_number", "output": "__gpuwm_rank"}  [segment 0: 1 task(s), keys []]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["p2", {"col": "p2"}], ["window", {"tumble": [{"col": "ts"}, 10000000]}], ["rn", {"col": "__gpuwm_rank"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["p2", {"col": "p2"}], ["window", {"col": "window"}], ["rn", {"col": "rn"}]], [["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["p2", {"col": "p2"}], ["rn", {"col": "rn"}]]]
x = s.withColumn("p2", F.col("price") * 2)
df = x.withColumn("rn", F.row_number().over(Window.partitionBy(F.window("ts", "10 seconds")).orderBy("p2"))).filter("rn <= 1")
