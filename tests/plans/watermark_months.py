# a watermark delay in months
# fail: INTERVAL_MONTHS
df = raw.withWatermark("ts", "1 month").groupBy(F.window("ts", "5 seconds"), "k").count()
