# a rank over rows with a column computed after their window column
# fail: RANK_COLUMN
x = s.withColumn("w", F.window("ts", "10 seconds")).withColumn("p2", F.col("price") * 2)
df = x.withColumn("rn", F.row_number().over(Window.partitionBy("w").orderBy("price"))).filter("rn <= 1")
