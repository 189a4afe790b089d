# a stream-static join (Nexmark q13's side input)
# fail: JOIN_STATIC
side = spark.createDataFrame([(1, "a")], "k bigint, name string")
df = s.join(side, "k")
