# format('memory') without queryName: Spark runs it, and its own error says a memory sink needs a name (with one,
# gpuwm runs it: test_accelerate)
# fail: SINK_CALL
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.format("memory")._why_not()
