# a Kafka sink of columns Spark's Kafka sink does not write
# fail: SINK_COLUMNS
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.format("kafka")._why_not()
