# format('memory'), the notebook habit
# fail: SINK_FORMAT
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.format("memory")._why_not()
