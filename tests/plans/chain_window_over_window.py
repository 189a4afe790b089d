# a window over a window's rows by window_time(window)
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: count = count(*)
#     aggregate  window(window_time(window), 0:00:10) by []: total = sum(count)
#     output     window, total
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:05)
#   stage 0      window {"window": "Tumble('ts', datetime.timedelta(seconds=5))", "by": ["k"], "aggs": [["__gpuwm_agg0", "*", "count"]], "emit": "on-window-close", "window_time": true}  [segment 0: 1 task(s), keys ['k']]
#   stage 1      window {"window": "Tumble('window_time', datetime.timedelta(seconds=10))", "by": [], "aggs": [["__gpuwm_agg0_s1", "__gpuwm_agg0", "sum"]], "emit": "on-window-close", "window_time": false}  [segment 0: 1 task(s), keys []]
#   sink steps   [[["window", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}], ["total", {"col": "__gpuwm_agg0_s1"}]]]
df = (s.groupBy(F.window("ts", "5 seconds"), "k").count()
      .groupBy(F.window(F.window_time("window"), "10 seconds")).agg(F.sum("count").alias("total")))
