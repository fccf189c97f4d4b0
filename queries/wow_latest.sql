-- wow_latest: the last N loaded days of views and likes, each with its week-over-week change.
-- params: days (default 14)
-- columns: metric, date, current, last, delta, pct_change, current_7d, last_7d, delta_7d, pct_change_7d
SELECT metric, date, current, last, delta, pct_change, current_7d, last_7d, delta_7d, pct_change_7d
FROM wow_deltas
WHERE date > (SELECT max(date) FROM wow_deltas) - coalesce(CAST(getvariable('days') AS INTEGER), 14)
ORDER BY metric, date;
