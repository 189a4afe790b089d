-- Nexmark q1-like: projections and filters only
-- fail: STATELESS
SELECT auction, bidder, price * 0.908 AS euro, date_time FROM bid WHERE price > 10
