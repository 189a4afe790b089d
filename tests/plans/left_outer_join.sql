-- a left outer join with both bounds
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04 (left)
--     watermark  date_time__right, delay 0:00:04 (right)
--       of rows  where (B.auction IS NOT NULL) (Spark's optimizer filters them below the watermark)
--     join       left on [['id', 'auction']], date_time__right between date_time + 0:00:00 and date_time + 0:00:10
--     output     id, price
--   Spark runs: the source, parquet FileSource[<in>/auction] and Project over parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT A.id, B.price FROM auction A LEFT OUTER JOIN bid B ON A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL 10 SECONDS
