# a sort of the aggregation's rows
# fail: NODE_ABOVE
df = s.groupBy(F.window("ts", "5 seconds"), "k").count().orderBy("count")
