# format('orc'): a file format gpuwm's sinks do not write
# fail: SINK_FORMAT
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.format("orc")._why_not()
