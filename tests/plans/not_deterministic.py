# a filter with rand() between withWatermark and the window
# fail: NOT_DETERMINISTIC
df = s.filter(F.rand(3) > 0.5).groupBy(F.window("ts", "5 seconds"), "k").count()
