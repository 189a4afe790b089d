# a dedup by the window of the aggregation below
# fail: DEDUP_KEY
w = s.groupBy(F.window("ts", "5 seconds"), "k").count()
df = w.dropDuplicatesWithinWatermark(["window"])
