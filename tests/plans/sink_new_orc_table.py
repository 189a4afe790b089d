# toTable of a new ORC table (a new Parquet table's runs in gpuwm: test_accelerate's file-sink test)
# fail: SINK_TABLE
from gpuwm.spark.front.writer import _table

df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return _table(df, "gpuwm_plans_new_table", "orc", {})[1]
