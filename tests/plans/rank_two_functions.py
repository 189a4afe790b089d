# two window functions over one partition
# fail: RANK_FUNCTIONS
w = Window.partitionBy(F.window("ts", "10 seconds")).orderBy("price")
df = s.select("*", F.row_number().over(w).alias("rn"), F.rank().over(w).alias("r")).filter("rn <= 2")
