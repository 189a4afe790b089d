# a window struct of a join's rows (Nexmark q7's) read as a column by another join
# fail: WINDOW_STRUCT
c = raw.withWatermark("ts", "10 seconds").selectExpr("ts AS c_ts", "k AS c_k", "price AS c_p")
m = (s.groupBy(F.window("ts", "5 seconds")).agg(F.max("price").alias("maxprice"))
     .select("window", F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice"))
q7 = s.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend"))
df = q7.select("ts", "k", "window").join(c, F.expr("k = c_k AND c_ts BETWEEN ts AND ts + interval 3 seconds"))
