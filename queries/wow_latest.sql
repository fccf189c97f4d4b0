-- wow_latest: the last N loaded days of views and likes, each with its week-over-week change.
-- params: days (default 14)
-- columns: metric, date, current, last, delta, pct_change, current_7d, last_7d, delta_7d, pct_change_7d
SELECT organization, metric, date, current, last, delta, pct_change, current_7d, last_7d, delta_7d, pct_change_7d
FROM wow_deltas
QUALIFY date > max(date) OVER (PARTITION BY organization) - coalesce(CAST(getvariable('days') AS INTEGER), 14)
ORDER BY organization, metric, date;
