-- a grouping without a window: Spark runs it in update mode; gpuwm refuses it
-- fail: NO_WINDOW
SELECT auction, count(*) AS n FROM bid GROUP BY auction
