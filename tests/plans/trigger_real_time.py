# Spark's real-time trigger (PySpark 4.2 on): its real-time mode runs no mapInArrow
# spark: 4.2-
# fail: TRIGGER
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.trigger(realTime="5 seconds")._why_not()
