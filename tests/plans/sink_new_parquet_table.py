# toTable of a new Parquet table
# fail: SINK_TABLE
from gpuwm.spark.front.writer import _table

df = s.groupBy(F.window("ts", "5 seconds"), "k").count()

def write(w):
    return _table(df, "gpuwm_plans_new_table", None, {})[1]
