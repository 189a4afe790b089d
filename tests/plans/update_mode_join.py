# an inner join in update mode: Spark 4.2 runs it (SPARK-56384), 4.0 and 4.1 refuse it
# spark: 4.0-4.1
# mode: update
# fail: OUTPUT_MODE
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds")
df = s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
