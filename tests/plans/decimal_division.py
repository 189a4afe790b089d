# a decimal division after the window (Spark's rounding rules: not gpuwm's)
# fail: EXPRESSION
df = s.groupBy(F.window("ts", "5 seconds"), "k").count().selectExpr("count / 2.5")
