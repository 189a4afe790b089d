# a rank with state_ttl over a stream without withWatermark
# fail: NO_WATERMARK
settings = {"state_ttl": "1 hour"}
df = raw.withColumn("rn", F.row_number().over(Window.partitionBy("k").orderBy("ts"))).filter("rn <= 1")
