# an aggregation over a stream without withWatermark
# fail: NO_WATERMARK
df = raw.groupBy(F.window("ts", "5 seconds"), "k").count()
