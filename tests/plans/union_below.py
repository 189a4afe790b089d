# a union below the aggregation
# fail: NODE_BELOW
df = s.union(s).groupBy(F.window("ts", "5 seconds"), "k").count()
