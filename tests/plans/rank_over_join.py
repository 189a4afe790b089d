# a rank over an interval join's rows, partitioned by keys alone
# fail: RANK_INPUT
b = raw.selectExpr("ts AS ts2", "k AS k2", "price AS p2").withWatermark("ts2", "5 seconds")
j = s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
df = j.withColumn("rn", F.row_number().over(Window.partitionBy("k").orderBy("p2"))).filter("rn <= 1")
