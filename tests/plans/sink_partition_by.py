# partitionBy on the writer
# fail: SINK_CALL
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.partitionBy("k")._why_not()
