# dropDuplicates without the event time over a window's rows
# fail: DEDUP_FOREVER
df = s.groupBy(F.window("ts", "5 seconds"), "k").count().dropDuplicates(["k"])
