-- movers: the days of the last N loaded days whose 7-day sums changed most on the week before,
-- biggest relative change first (pct_change_7d is a fraction: 0.25 is +25 %).
-- params: days (default 28), top (default 5)
-- columns: metric, date, current_7d, last_7d, delta_7d, pct_change_7d
WITH recent AS (
    SELECT organization, metric, date, current_7d, last_7d, delta_7d, pct_change_7d
    FROM wow_deltas
    QUALIFY date > max(date) OVER (PARTITION BY organization) - coalesce(CAST(getvariable('days') AS INTEGER), 28)
)
SELECT organization, metric, date, current_7d, last_7d, delta_7d, pct_change_7d
FROM recent
WHERE pct_change_7d IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY organization ORDER BY abs(pct_change_7d) DESC, metric, date)
        <= coalesce(CAST(getvariable('top') AS INTEGER), 5)
ORDER BY organization, abs(pct_change_7d) DESC, metric, date;
