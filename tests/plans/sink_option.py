# a Parquet sink option gpuwm's sink does not apply
# fail: SINK_OPTION
df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return w.format("parquet").option("compression", "zstd")._why_not()
