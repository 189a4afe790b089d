# one source read by both sides of a graph's join, one side's with a column its aggregate computes
# fail: JOIN_SOURCE_NAMES
m = (bid.groupBy(F.window("date_time", "10 seconds"))
     .agg(F.sum(F.col("price") * 2).alias("twice"), F.max("price").alias("maxprice"))
     .select(F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice"))
df = bid.join(m, F.expr("price = maxprice AND date_time >= wstart AND date_time < wend"))
