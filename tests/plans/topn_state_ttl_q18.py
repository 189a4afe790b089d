# Nexmark q18 (the last bid per bidder and auction) with state_ttl
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  date_time, delay 0:00:04
#     top-n      row_number() <= 1 per partition (closed when the watermark passes its latest date_time by 1 hour: state_ttl), ['bidder', 'auction'] ORDER BY date_time DESC NULLS LAST: emitted when the partition closes
#     output     auction, bidder, price, date_time, rank_number
#   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
#   watermark    date_time - 0:00:04 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   stage 0      topn {"window": null, "by": ["bidder", "auction"], "order": [["date_time", true, false]], "n": 1, "fn": "row_number", "output": "__gpuwm_rank", "ttl": ["date_time", "1 hour"]}  [segment 0: 1 task(s), keys ['bidder', 'auction']]
#   sink steps   [[["auction", {"col": "auction"}], ["bidder", {"col": "bidder"}], ["price", {"col": "price"}], ["date_time", {"col": "date_time"}], ["rank_number", {"col": "__gpuwm_rank"}]], [["auction", {"col": "auction"}], ["bidder", {"col": "bidder"}], ["price", {"col": "price"}], ["date_time", {"col": "date_time"}], ["rank_number", {"col": "rank_number"}]], [["auction", {"col": "auction"}], ["bidder", {"col": "bidder"}], ["price", {"col": "price"}], ["date_time", {"col": "date_time"}], ["rank_number", {"col": "rank_number"}]]]
settings = {"state_ttl": "1 hour"}
rn = F.row_number().over(Window.partitionBy("bidder", "auction").orderBy(F.desc("date_time")))
df = bid.withColumn("rank_number", rn).filter("rank_number <= 1")
