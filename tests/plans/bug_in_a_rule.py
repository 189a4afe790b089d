# an exception escaping a rule: gpuwm's bug, and Spark runs the query
# fail: GPUWM_BUG
def broken(ctx, node):
    raise KeyError("planted")

rules = {"Aggregate": broken}
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()
