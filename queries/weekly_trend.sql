-- weekly_trend: views and likes per ISO week (Monday start), with the change on the week before.
-- Incomplete weeks (fewer than 7 loaded days) are flagged, not hidden.
-- params: weeks (default 26)
-- columns: week_start, views, views_delta, views_pct_change, likes, likes_delta, likes_pct_change, complete
WITH w AS (
    SELECT *, max(week_start) OVER (PARTITION BY organization) AS latest FROM weekly_totals
)
SELECT v.organization, v.week_start,
       v.total AS views, v.delta AS views_delta, v.pct_change AS views_pct_change,
       l.total AS likes, l.delta AS likes_delta, l.pct_change AS likes_pct_change,
       v.complete AND coalesce(l.complete, false) AS complete
FROM w AS v
LEFT JOIN weekly_totals AS l
       ON l.organization = v.organization AND l.metric = 'likes' AND l.week_start = v.week_start
WHERE v.metric = 'views'
  AND v.week_start > v.latest - 7 * coalesce(CAST(getvariable('weeks') AS INTEGER), 26)
ORDER BY v.organization, v.week_start;
