# a left outer join in update mode: every Spark refuses it (outer joins are append-only)
# mode: update
# fail: OUTPUT_MODE
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds")
df = s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"), "left_outer")
