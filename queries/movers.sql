-- movers: the days of the last N loaded days whose 7-day sums changed most on the week before,
-- biggest relative change first (pct_change_7d is a fraction: 0.25 is +25 %).
-- params: days (default 28), top (default 5)
-- columns: metric, date, current_7d, last_7d, delta_7d, pct_change_7d
SELECT metric, date, current_7d, last_7d, delta_7d, pct_change_7d
FROM wow_deltas
WHERE date > (SELECT max(date) FROM wow_deltas) - coalesce(CAST(getvariable('days') AS INTEGER), 28)
  AND pct_change_7d IS NOT NULL
ORDER BY abs(pct_change_7d) DESC, metric, date
LIMIT coalesce(CAST(getvariable('top') AS INTEGER), 5);
