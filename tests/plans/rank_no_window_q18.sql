-- Nexmark q18 as written, without state_ttl: its state would never be cleaned
-- fail: RANK_STATE
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) WHERE rank_number <= 1
